"""How the parity documents look on the wire: camelCase keys, frozen, no unknown key.

Records, results, verdicts and thresholds all travel as JSON (the runner's result
document, the ParityCheck status, the CRD schema); they share this one configuration so
a key is spelled the same everywhere. Imports pydantic only, like `thresholds`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

WIRE_CONFIG = ConfigDict(
    alias_generator=to_camel,
    populate_by_name=True,
    extra="forbid",
    frozen=True,
)


class WireModel(BaseModel):
    """A parity document: snake_case in Python, camelCase on the wire."""

    model_config = WIRE_CONFIG
