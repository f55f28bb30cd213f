"""kopf handlers of the operator, one module per concern.

`load_handlers` imports every module of this package, so a new handler module
(e.g. `paritycheck.py`) is registered by existing, with no list to update.
Modules whose name starts with `_` hold shared process state, not handlers.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_handlers() -> list[str]:
    """Import every handler module (registering its kopf handlers); their names."""
    loaded: list[str] = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{module.name}")
        loaded.append(module.name)
    return loaded
