"""Which threshold values a ParityCheck admits: those a measurement can both pass and fail.

`Thresholds` and `RegressionTolerance` (infergate.parity.thresholds) bound each field to
the range of its metric. Admission asks more: a limit must leave room on both sides. A
minimum rate of 0 passes every measurement and one above 1 none; a maximum error of 1
(for a share) or of a huge number (for an unbounded metric) can never fail. The ranges
below follow how `parity.verdict` decides (`>=` limits pass on the lower bound, `<=` on
the upper, and a limit at the end of its metric's range on what was observed):

- a minimum share (0..1): 0 < limit <= 1;
- a minimum cosine (-1..1): -1 < limit <= 1;
- a maximum share, drop or |delta-p| (0..1): 0 <= limit < 1;
- a maximum of an unbounded metric: 0 <= limit <= a ceiling far past any working pair
  of engines (a limit beyond it would pass a broken candidate);
- a ratio of the far to the near positions: 0 < limit <= its ceiling (it is never 0).

`AdmittedRanges` carries one table into both places a value is judged: the CRD schema
(each field's bounds and description) and the pydantic validation (the message names the
field and its range), so the API server and the operator give the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

KL_CEILING = 100.0
"""Nats: a KL, log-perplexity or logprob-gap limit above this passes a candidate whose
tokens the baseline gives a probability of e^-100."""
HIDDEN_ERROR_CEILING = 1e6
"""Activation units: last-layer hidden states of a working model stay far below."""
RELATIVE_ERROR_CEILING = 100.0
"""No unit: states of equal norm pointing anywhere differ by a relative L2 of at most 2."""
NORM_LOG_RATIO_CLIP = 50.0
"""The measured |log norm ratio| is clipped here (parity.hidden.LOG_NORM_RATIO_CLIP): a
limit at or above it cannot fail."""
RATIO_CEILING = 1e6
"""No unit: a far / near ratio limit above a million positions' worth passes a rope error."""
TOKENS_CEILING = 1048576
"""Tokens: the longest engine.maxModelLen."""
MAX_TOKENS_MAX = 32768
"""Tokens: the most sampling.maxTokens generates per prompt."""


@dataclass(frozen=True)
class Range:
    """Allowed values of one field: `low` to `high`, each end open or closed."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    @property
    def text(self) -> str:
        """The range as a person reads it, e.g. "0 < x <= 1"."""
        low = "<" if self.low_open else "<="
        high = "<" if self.high_open else "<="
        return f"{_number(self.low)} {low} x {high} {_number(self.high)}"

    def schema_bounds(self) -> dict[str, Any]:
        """The range as JSON Schema 2020-12 keywords (pydantic's form)."""
        bounds: dict[str, Any] = {}
        bounds["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        bounds["exclusiveMaximum" if self.high_open else "maximum"] = self.high
        return bounds


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


_MIN_SHARE = Range(
    0.0, 1.0, low_open=True, why="a limit of 0 passes every measurement, one above 1 none"
)
_MIN_COSINE = Range(-1.0, 1.0, low_open=True, why="a limit of -1 passes every measurement")
_MAX_SHARE = Range(0.0, 1.0, high_open=True, why="a limit of 1 fails no measurement")
_NATS = Range(0.0, KL_CEILING, why=f"a larger limit passes a candidate {KL_CEILING:g} nats off")
_HIDDEN = Range(0.0, HIDDEN_ERROR_CEILING, why="a larger limit passes broken hidden states")
_RELATIVE = Range(0.0, RELATIVE_ERROR_CEILING, why="a larger limit passes broken hidden states")
_RATIO = Range(
    0.0,
    RATIO_CEILING,
    low_open=True,
    why="a ratio is never 0, and a larger limit passes a rope error",
)

THRESHOLD_RANGES: Mapping[str, Range] = {
    "minTokenMatchRate": _MIN_SHARE,
    "minTokenAgreement": _MIN_SHARE,
    "minFirstDivergenceP10": Range(
        0.0,
        MAX_TOKENS_MAX,
        low_open=True,
        why="a limit of 0 passes every measurement; it must not exceed sampling.maxTokens either",
    ),
    "minLegitimateDivergenceRate": _MIN_SHARE,
    "maxDivergenceLogprobGap": _NATS,
    "maxMeanKl": _NATS,
    "minSameTopRate": _MIN_SHARE,
    "maxHiddenMaxAbsErr": _HIDDEN,
    "maxHiddenMeanAbsErr": _HIDDEN,
    "maxHiddenRelL2P99": _RELATIVE,
    "minHiddenCosineP1": _MIN_COSINE,
    "maxLongSeqDivergenceRate": _MAX_SHARE,
    "maxLongToShortKlRatio": _RATIO,
    "maxLongSameTopDrop": _MAX_SHARE,
    "longPromptTokens": Range(1.0, TOKENS_CEILING, why="no prompt is longer"),
    "maxIllegitimateDivergenceRate": _MAX_SHARE,
    "maxKlP99": _NATS,
    "maxLogPerplexityRatio": _NATS,
    "maxDeltaPMean": _MAX_SHARE,
    "maxDeltaPRms": _MAX_SHARE,
    "maxHiddenNormLogRatio": Range(
        0.0,
        NORM_LOG_RATIO_CLIP,
        high_open=True,
        why="the measurement is clipped at 50, so 50 fails none",
    ),
    "minHiddenCosine": _MIN_COSINE,
    "maxLongToShortHiddenRatio": _RATIO,
}
"""Thresholds keys bounded beyond their metric's range. confidence and the evidence
minimums (minPrompts, minLongPrompts, minScoredSteps) are parameters, not limits."""

REGRESSION_RANGES: Mapping[str, Range] = {
    "maxTokenMatchRateDrop": _MAX_SHARE,
    "maxTokenAgreementDrop": _MAX_SHARE,
    "maxSameTopRateDrop": _MAX_SHARE,
    "maxMeanKlIncrease": _NATS,
    "maxHiddenRelL2Increase": _RELATIVE,
}
"""RegressionTolerance keys bounded likewise (a drop of 1 never regresses)."""


def out_of_range(
    field: str, model: BaseModel, ranges: Mapping[str, Range]
) -> tuple[str, float, Range] | None:
    """The first (key, value, range) of `model` outside `ranges`, or None."""
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        value = getattr(model, name)
        allowed = ranges.get(key)
        if allowed is not None and value is not None and value not in allowed:
            return f"{field}.{key}", value, allowed
    return None


# eq=False: hashed by identity, as typing hashes the metadata of an Annotated type.
@dataclass(frozen=True, eq=False)
class AdmittedRanges:
    """`Annotated[Model, AdmittedRanges("thresholds", RANGES)]`: the model's fields in the CRD
    schema take these bounds (and say them in their descriptions), and a value outside is
    refused naming `field.key`, the value and the range."""

    field: str
    ranges: Mapping[str, Range]

    def __get_pydantic_core_schema__(
        self, source: type[BaseModel], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        # The model's own definition: this field is its only user in a resource's schema.
        definition = handler.resolve_ref_schema(json_schema)
        for key, allowed in self.ranges.items():
            _bound(definition["properties"][key], allowed)
        return json_schema

    def _check(self, model: BaseModel) -> BaseModel:
        found = out_of_range(self.field, model, self.ranges)
        if found is not None:
            key, value, allowed = found
            raise ValueError(
                f"{key}: {_number(value)} is not allowed; allowed: {allowed.text} ({allowed.why})"
            )
        return model


def _bound(prop: dict[str, Any], allowed: Range) -> None:
    """Replace the bounds of one optional number property and state them in its description."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") in ("number", "integer"):
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                branch.pop(key, None)
            bounds = allowed.schema_bounds()
            if branch["type"] == "integer":
                bounds = {key: int(value) for key, value in bounds.items()}
            branch.update(bounds)
    description = prop.get("description", "").rstrip()
    prop["description"] = f"{description} Allowed: {allowed.text}: {allowed.why}."
