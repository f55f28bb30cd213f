"""What a check's positive control found: the power of its suite, shown every time.

A positive control is a known small harmful change scored through the same suite, the
same metrics and the same limits as the check itself (`infergate.parity.control` makes
it and decides on it). A check that cannot detect its own control proves nothing by
passing, so the verdict says Inconclusive; the report states the smallest change of the
control's kind the suite detected (the minimum detectable effect). Models only, so the
result document can carry them without importing the arithmetic.
"""

from __future__ import annotations

from pydantic import Field

from infergate.parity.wire import WireModel


class ControlStep(WireModel):
    """The control at one size: whether any limit of the check failed on it."""

    scale: float = Field(description="The final norm's scale (1.02: every logit and the last "
                         "hidden state 2% larger).")  # fmt: skip
    detected: bool = Field(description="At least one of the check's limits failed on it.")
    failed: list[str] = Field(description="Threshold keys that failed on the control.")


class ControlResult(WireModel):
    """The positive control of one check and the minimum detectable effect of its suite."""

    perturbation: str = Field(description="What the control changes, in words.")
    scale: float = Field(description="The control's own size (must be detected).")
    detected: bool = Field(description="The check's limits failed on its control.")
    failed: list[str] = Field(description="Threshold keys that failed on the control.")
    ladder: list[ControlStep] = Field(description="The control at every size tried.")
    minimum_detectable: float | None = Field(
        description="Smallest relative size of the control (scale - 1) the suite detected; "
        "None: none of the sizes tried."
    )
    prompts: int = Field(description="Prompts the control was scored on.")
