"""kopf handlers of the operator, one module per concern.

`load_handlers` imports every module of this package, so a new handler module
(e.g. `paritycheck.py`) is registered by existing, with no list to update.
Modules whose name starts with `_` hold shared process state, not handlers.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection


def handler_modules() -> list[str]:
    """Names of the handler modules of this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load_handlers(exclude: Collection[str] = ()) -> list[str]:
    """Import every handler module but `exclude` (registering its kopf handlers); their names."""
    known = handler_modules()
    unknown = sorted(set(exclude) - set(known))
    if unknown:
        raise ValueError(f"no controller module {', '.join(unknown)}; known: {', '.join(known)}")
    loaded = [name for name in known if name not in exclude]
    for name in loaded:
        importlib.import_module(f"{__name__}.{name}")
    return loaded
