"""Pool every mirror pod's scored copies into one comparison (pure: documents in, results out).

With several mirror pods each sees a share of the live requests; the profile's evidence
floor is met by all of them together, not by each. Every pod hands over its scored
pairs (`infergate.mirror.pairs`), and the runner compares them all in ONE
`ParityComparison` per kind (teacher-forced: every copy; greedy: the greedy copies),
under the record metadata and thresholds it sent to every pod.

Fail closed: a pod's result is used only when it is the session this check opened
(same id, candidate revision and both sides' record metadata), its pairs decode, their
number is the pod's own scored and greedy counts, and their bytes stay inside the
budget the pod was given. Anything else makes the whole check Error (`problems`): a
verdict never stands on some pods' evidence while another's is unreadable or forged.
Prompt ids are namespaced by pod (`p<index>/<id>`), so two pods' sequence numbers never
collide.

Bounds: the runner gives each pod `pair_budget(pods)` bytes of arrays (`POOL_BYTES` over
all pods, at most `POD_PAIR_BYTES_MAX` each, the mirror pod's memory being 512Mi), and
reads at most `response_limit(budget)` bytes of its result. A pod whose budget is spent
copies nothing more (its copies are refused as `poolFull`): fewer copies than
`minRequests` then make the check Inconclusive, never Passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from infergate.mirror.pairs import PairFormatError, decode_pair, pair_bytes, with_prompt_id
from infergate.mirror.scoring import ScoredPair
from infergate.parity.calibrated import DerivedLimits
from infergate.parity.compare import ParityComparison
from infergate.parity.fingerprints import FingerprintExpectation
from infergate.parity.limits import LimitSource
from infergate.parity.metrics import ParityResult
from infergate.parity.record import ParityInputError, RecordMeta
from infergate.parity.thresholds import Thresholds

POOL_BYTES = 128 * 1024 * 1024
"""Array bytes of scored pairs the runner takes over all mirror pods together."""
POD_PAIR_BYTES_MAX = 32 * 1024 * 1024
"""At most this much per mirror pod (its container has 512Mi)."""
POD_PAIR_BYTES_MIN = 1024 * 1024


class PodResultError(ValueError):
    """A mirror pod's result cannot be used for this check."""


@dataclass(frozen=True)
class PoolSpec:
    """What every pod's result must match, and what the pooled comparison runs under."""

    session: str
    candidate_revision: str
    baseline: RecordMeta
    candidate: RecordMeta
    thresholds: Thresholds
    pair_bytes_per_pod: int
    allowed_config_differences: tuple[str, ...] = ()
    disabled: Mapping[str, str] = field(default_factory=dict)
    store_prompts: bool = False
    fingerprints: FingerprintExpectation = FingerprintExpectation.REQUIRED
    limits: LimitSource | None = None
    calibration: DerivedLimits | None = None
    """The limits derived from the baseline's kept noise, and whether a calibration the
    profile needs is missing (then no pooled comparison passes)."""


@dataclass(frozen=True)
class Pooled:
    """The pooled comparisons (None where no copy of that kind), and the unusable pods."""

    forced: ParityResult | None
    greedy: ParityResult | None
    problems: list[str]


def pair_budget(pods: int) -> int:
    """Array bytes of scored pairs each of `pods` mirror pods may keep."""
    share = POOL_BYTES // max(1, pods)
    return max(POD_PAIR_BYTES_MIN, min(POD_PAIR_BYTES_MAX, share))


def response_limit(budget: int) -> int:
    """Most bytes of a pod's result the runner reads: base64 (4/3) of its budget, the
    per-pair overhead `pair_bytes` already counts, and room for the counts and metadata."""
    return budget * 3 // 2 + 1024 * 1024


def pod_pairs(document: Any, spec: PoolSpec) -> list[ScoredPair]:
    """The scored pairs of one pod's result, checked against `spec`."""
    if not isinstance(document, Mapping):
        raise PodResultError(f"the result is not an object ({type(document).__name__})")
    session = document.get("session")
    if not isinstance(session, Mapping):
        raise PodResultError("the result names no session")
    if session.get("id") != spec.session:
        raise PodResultError(
            f"the result is of session {session.get('id')!r}, not {spec.session!r}"
        )
    if session.get("candidateRevision") != spec.candidate_revision:
        raise PodResultError(
            f"the result scored revision {session.get('candidateRevision')!r}, not "
            f"{spec.candidate_revision!r}"
        )
    for side, expected in (("baseline", spec.baseline), ("candidate", spec.candidate)):
        try:
            echoed = RecordMeta.model_validate(session.get(side))
        except ValidationError as err:
            raise PodResultError(f"the {side} record metadata is unreadable: {err}") from err
        if echoed != expected:
            raise PodResultError(f"the {side} record metadata differs from the check's")
    counts = document.get("counts")
    raw = document.get("pairs")
    if not isinstance(counts, Mapping) or not isinstance(raw, list):
        raise PodResultError("the result has no counts or no pairs")
    scored, greedy = _count(counts, "scored"), _count(counts, "greedy")
    if len(raw) != scored:
        raise PodResultError(f"{len(raw)} scored pairs for {scored} scored copies")
    pairs: list[ScoredPair] = []
    seen: set[str] = set()
    total = 0
    for index, item in enumerate(raw):
        try:
            pair = decode_pair(item)
        except PairFormatError as err:
            raise PodResultError(f"pair {index}: {err}") from err
        if pair.baseline.prompt_id in seen:
            raise PodResultError(f"prompt id {pair.baseline.prompt_id!r} appears twice")
        seen.add(pair.baseline.prompt_id)
        total += pair_bytes(pair)
        if total > spec.pair_bytes_per_pod:
            raise PodResultError(
                f"its pairs hold more than the {spec.pair_bytes_per_pod} bytes it was given"
            )
        pairs.append(pair)
    with_greedy = sum(1 for p in pairs if p.greedy is not None)
    if with_greedy != greedy:
        raise PodResultError(f"{with_greedy} greedy pairs for {greedy} greedy copies")
    return pairs


def pool_results(results: Sequence[Any], spec: PoolSpec) -> Pooled:
    """One teacher-forced and one greedy comparison over every pod's pairs; any pod whose
    result cannot be used is a problem, and then nothing is compared."""
    per_pod: list[list[ScoredPair]] = []
    problems: list[str] = []
    for index, document in enumerate(results):
        try:
            per_pod.append(pod_pairs(document, spec))
        except PodResultError as err:
            problems.append(f"mirror pod {index}: {err}")
    if problems:
        return Pooled(None, None, problems)
    forced, greedy = _comparison(spec), _comparison(spec)
    counted = {"forced": 0, "greedy": 0}
    for index, pairs in enumerate(per_pod):
        for pair in pairs:
            named = with_prompt_id(pair, f"p{index}/{pair.baseline.prompt_id}")
            try:
                forced.add(named.baseline, named.forced)
                counted["forced"] += 1
                if named.greedy is not None:
                    greedy.add(named.baseline, named.greedy)
                    counted["greedy"] += 1
            except ParityInputError as err:
                problems.append(f"mirror pod {index}: {err}")
    if problems:
        return Pooled(None, None, problems)
    return Pooled(
        _finalized(forced, spec) if counted["forced"] else None,
        _finalized(greedy, spec) if counted["greedy"] else None,
        [],
    )


def _comparison(spec: PoolSpec) -> ParityComparison:
    """The pool's comparison. Mirrored copies never carry decode evidence as `parity.decode`
    needs it: a teacher-forced copy has no decode path of the canary (it scored the
    stable's answer), and neither side of a greedy copy scores its own answer again. So a
    shadow check does not require it; its greedy copies are its decode-path evidence
    (`shadow_judge`), and the decode limits still decide wherever evidence exists."""
    thresholds = spec.thresholds
    if thresholds.require_decode_evidence:
        thresholds = thresholds.model_copy(update={"require_decode_evidence": False})
    return ParityComparison(
        spec.baseline,
        spec.candidate,
        thresholds,
        spec.allowed_config_differences,
        disabled=spec.disabled,
        fingerprints=spec.fingerprints,
        limits=spec.limits,
    )


def _finalized(comparison: ParityComparison, spec: PoolSpec) -> ParityResult:
    result = comparison.finalize()
    if spec.calibration is not None:
        result = result.model_copy(update={"calibration": spec.calibration})
    # Worst prompts' token ids reach the report only when the check asked to store prompts.
    return result if spec.store_prompts else result.model_copy(update={"outputs": []})


def _count(counts: Mapping[str, Any], key: str) -> int:
    value = counts.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PodResultError(f"counts.{key} is not a count: {value!r}")
    return value
