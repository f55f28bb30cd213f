"""A shadow check's verdict from the mirror's results: the core's verdict, the evidence."""

# ruff: noqa: ARG002 - the fakes take the protocols' arguments, used or not

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest

from infergate.api.common import ConfigMapKeyReference
from infergate.api.enums import CheckPhase
from infergate.api.parity_check import ParityCheckSpec
from infergate.api.shadow import ShadowSettings
from infergate.mirror.pairs import decode_pair, encode_pair, pair_bytes
from infergate.mirror.scoring import ScoredPair
from infergate.parity.calibrated import DerivedLimits
from infergate.parity.gate_limits import noise_limits
from infergate.parity.profiles import PROFILES, Gate
from infergate.parity.record import RecordMeta, TopLogprobs
from infergate.parity.thresholds import ProfileName, Thresholds
from infergate.plan.check.status import Judgement
from infergate.plan.ownership import Controller
from infergate.runner import shadow
from infergate.runner.endpoints import LOCAL_EXECUTOR
from infergate.runner.shadow import without_hidden
from infergate.runner.shadow_judge import judge_results
from infergate.runner.shadow_pool import (
    POOL_BYTES,
    PoolSpec,
    pair_budget,
    pool_results,
    response_limit,
)
from infergate.runner.sides import SideTarget
from infergate.suite import Suite
from tests.unit.parity.builders import SIDE_FINGERPRINTS, meta, prompt, replace, teacher_forced_on
from tests.unit.runner.fakes import controller_ref, deployment_owner, uid_of

PROFILE = ProfileName.BF16_KERNEL
# The profile's limits and evidence floor (32 prompts, 4,096 scored positions), less the
# long-context minimum: the copies built here are short live requests (the long-context
# checks have their own tests in tests/unit/parity).
THRESHOLDS = without_hidden(PROFILES[PROFILE].block.model_copy(update={"min_long_prompts": 0}))
# Copies of 12 prompt and 128 output tokens: 40 of them score 5,560 positions.
COPIES = 40
MIB = 1024 * 1024
SESSION = "llm/qwen-check"
REVISION = "bbbbbbbbbb"
BASELINE, CANDIDATE = meta(config_hash="rev-a"), meta(config_hash="rev-a")


def _spec(pods: int = 1, **changes: Any) -> PoolSpec:
    fields: dict[str, Any] = {
        "session": SESSION, "candidate_revision": REVISION, "baseline": BASELINE,
        "candidate": CANDIDATE, "thresholds": THRESHOLDS, "pair_bytes_per_pod": pair_budget(pods),
    }  # fmt: skip
    return PoolSpec(**(fields | changes))


def _pair(i: int, shift: float = 0.0, greedy_shift: float | None = None) -> ScoredPair:
    """Copy i: the stable's record, the canary forced along it (logprobs moved by `shift`),
    and, when `greedy_shift` is given, the canary's own greedy answer (the same tokens)."""
    base = prompt(f"m{i:06d}", seed=i, hidden=None, output_tokens=128)
    forced = teacher_forced_on(base, shift)
    on_canary = replace(base, top_logprobs=forced.top, teacher_forced=forced)
    greedy = None
    if greedy_shift is not None:
        own = teacher_forced_on(base, greedy_shift)
        greedy = replace(base, top_logprobs=own.top, teacher_forced=own)
    return ScoredPair(base, on_canary, greedy)


def _session_echo() -> dict[str, Any]:
    return {
        "id": SESSION,
        "candidateRevision": REVISION,
        "baseline": BASELINE.model_dump(mode="json", by_alias=True),
        "candidate": CANDIDATE.model_dump(mode="json", by_alias=True),
    }


def _pod(
    scored: int,
    *,
    shift: float = 0.0,
    canary_failures: int = 0,
    first: int = 0,
    greedy: int = 0,
    greedy_shift: float = 0.0,
) -> dict[str, Any]:
    """A mirror pod's result: `scored` copies numbered from `first`, the first `greedy` of
    them greedy requests."""
    pairs = [
        _pair(i, shift, greedy_shift if i - first < greedy else None)
        for i in range(first, first + scored)
    ]
    return {
        "counts": {
            "mirrored": scored * 5,
            "sampled": scored + canary_failures,
            "scored": scored,
            "greedy": greedy,
            "refused": {"notSampled": scored * 4},
            "canaryFailures": canary_failures,
            "lastError": "canary: HTTP 500" if canary_failures else None,
        },
        "session": _session_echo(),
        "pairs": [encode_pair(p) for p in pairs],
    }


def _judge(pods: list[Any], minimum: int = COPIES) -> CheckPhase:
    verdict, _, _ = judge_results(
        pods,
        ShadowSettings(min_requests=minimum),
        _spec(len(pods)),
        profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )
    return verdict.phase


def test_enough_agreeing_copies_pass() -> None:
    assert _judge([_pod(COPIES, greedy=COPIES)]) is CheckPhase.PASSED


def test_below_the_minimum_evidence_it_is_inconclusive_never_passed() -> None:
    verdict, _, totals = judge_results(
        [_pod(12)], ShadowSettings(min_requests=COPIES), _spec(), profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is CheckPhase.INCONCLUSIVE
    assert totals.scored == 12
    assert totals.pods == 1
    assert any(r.metric == "shadow.minRequests" for r in verdict.reasons)


def test_evidence_is_counted_over_every_mirror_pod() -> None:
    """Half the copies on each of two pods: neither meets the profile's floor alone, both
    together do, and the verdict stands on one comparison of all of them."""
    half = COPIES // 2
    halves = [_pod(half, greedy=half), _pod(half, first=half, greedy=half)]
    assert _judge(halves[:1], minimum=COPIES // 2) is CheckPhase.INCONCLUSIVE
    verdict, shown, totals = judge_results(
        halves, ShadowSettings(min_requests=COPIES), _spec(2), profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is CheckPhase.PASSED
    assert totals.scored == COPIES
    assert totals.pods == 2
    assert shown is not None
    assert shown.metrics.prompts == COPIES


@pytest.mark.parametrize(
    ("copies", "greedy", "expected"),
    [
        # Every copy agrees; the greedy ones alone are below the profile's 32 prompts.
        (COPIES, 5, CheckPhase.INCONCLUSIVE),
        (COPIES, COPIES // 2, CheckPhase.INCONCLUSIVE),
        # Enough greedy copies: the decode path is judged, and agrees.
        (COPIES, COPIES, CheckPhase.PASSED),
        # No greedy copy at all: the decode path was never seen, so nothing passes.
        (COPIES, 0, CheckPhase.INCONCLUSIVE),
    ],
)
def test_too_few_greedy_copies_keep_the_check_inconclusive(
    copies: int, greedy: int, expected: CheckPhase
) -> None:
    """The greedy copies are the only evidence of the canary's decode path: too few of
    them for the profile's floor is the verdict (Inconclusive), not a note beside a Pass."""
    verdict, _, totals = judge_results(
        [_pod(copies, greedy=greedy)], ShadowSettings(min_requests=COPIES), _spec(),
        profile=PROFILE.value, warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is expected, verdict.detail
    assert totals.greedy == greedy
    if expected is CheckPhase.INCONCLUSIVE:
        assert "greedy cop" in verdict.summary
        assert "greedy requests" in verdict.summary or "greedy requests" in str(verdict.detail)


def test_too_few_greedy_copies_that_disagree_still_fail() -> None:
    assert _judge([_pod(COPIES, greedy=5, greedy_shift=-1.5)]) is CheckPhase.FAILED


def test_greedy_copies_alone_below_the_floor_stay_inconclusive() -> None:
    """Five copies, all greedy: the teacher-forced comparison of every copy is below the
    floor too, so nothing decides and the check is Inconclusive."""
    assert _judge([_pod(5, greedy=5)], minimum=5) is CheckPhase.INCONCLUSIVE


def test_a_canary_drifting_on_live_requests_fails() -> None:
    assert _judge([_pod(COPIES, shift=-1.5)]) is CheckPhase.FAILED


def test_a_canary_that_failed_to_answer_copies_is_an_error() -> None:
    assert _judge([_pod(COPIES, canary_failures=3)]) is CheckPhase.ERROR


def test_nothing_scored_is_inconclusive() -> None:
    assert _judge([_pod(0)]) is CheckPhase.INCONCLUSIVE


def test_hidden_state_limits_are_left_out() -> None:
    assert all(
        getattr(THRESHOLDS, name) is None for name in Thresholds.model_fields if "hidden" in name
    )


class _Sessions:
    """The mirror pods' control API, as run_shadow sees it: one pod with `pod`'s copies,
    in the session the runner opened."""

    opened: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, urls: list[str], session: str, pod: dict[str, Any]) -> None:
        self.pod = pod

    def open(self, body: dict[str, Any]) -> None:
        _Sessions.opened.append(dict(body))

    def counts(self) -> list[dict[str, Any]]:
        return [self.pod["counts"]]

    def results(self, limit: int) -> list[dict[str, Any]]:
        [body] = _Sessions.opened
        echo = {k: body[k] for k in ("id", "candidateRevision", "baseline", "candidate")}
        return [{**self.pod, "session": echo}]

    def close(self) -> None:
        pass


@dataclass
class _Runner:
    """What run_shadow uses of the runner; the sides are revisions of one deployment."""

    name: str = "qwen-bbbbbbbbbb"
    check: dict[str, Any] = field(default_factory=dict)
    namespace: str = "llm"
    finished: list[tuple[Judgement, dict[str, Any]]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    mirror_owner: dict[str, Any] = field(default_factory=lambda: deployment_owner("qwen"))
    """The controller of the mirror's Service (the operator makes it for the deployment)."""
    extra_slices: list[dict[str, Any]] = field(default_factory=list)
    """EndpointSlices of the mirror's Service besides the one the cluster published."""
    layers: int | None = None

    def mark_running(self, total: int) -> bool:
        return True

    def resolve(self, spec: ParityCheckSpec) -> tuple[SideTarget, SideTarget]:
        common: dict[str, Any] = {
            "model": "tiny-qwen", "engine": "vllm", "engine_version": "0.32.0",
            "dtype": "bfloat16", "deployment": "qwen", "deployment_uid": uid_of("qwen"),
        }  # fmt: skip
        return (
            SideTarget(side="baseline", url="http://baseline", description="stable",
                       revision="aaaaaaaaaa", **common),
            SideTarget(side="candidate", url="http://candidate", description="canary",
                       revision="bbbbbbbbbb", **common),
        )  # fmt: skip

    def health(self, baseline: SideTarget, candidate: SideTarget) -> None:
        pass

    def meta(self, target: SideTarget, suite: Suite, asked: Mapping[str, Any]) -> RecordMeta:
        return meta(fingerprints={**SIDE_FINGERPRINTS, **asked})

    def progress(self, done: int, total: int) -> None:
        pass

    def limits(
        self, gate: Gate, metas: tuple[RecordMeta, RecordMeta], baseline: SideTarget,
        explicit: Thresholds,
    ) -> DerivedLimits:  # fmt: skip
        """No noise kept: the static limits, or Inconclusive where the profile needs one
        (the layers the runner is told of, as a deep model's records would say)."""
        return noise_limits(dataclasses.replace(gate, layers=self.layers), metas[1].dtype,
                            None, explicit)  # fmt: skip

    def mirror_service(self, name: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        service = {
            "metadata": {"name": name, "uid": uid_of(name), "ownerReferences": [self.mirror_owner]},
            "spec": {"ports": [{"name": "control", "port": 9000}]},
        }
        return service, [mirror_slice(name, "127.0.0.9"), *self.extra_slices]

    def write_report(self, document: dict[str, Any], html: str) -> ConfigMapKeyReference:
        self.reports.append(document)
        return ConfigMapKeyReference(name=f"{self.name}-report", key="result.json")

    def finish(
        self, verdict: Judgement, baseline: SideTarget, candidate: SideTarget,
        report: ConfigMapKeyReference, extra: Mapping[str, Any],
    ) -> None:  # fmt: skip
        self.finished.append((verdict, dict(extra)))


def mirror_slice(
    service: str, address: str, *, manager: str = LOCAL_EXECUTOR, owner: str | None = None
) -> dict[str, Any]:
    """A slice of the mirror's Service with one ready pod; by default as the cluster
    publishes it (its manager's label, controlled by the Service)."""
    return {
        "metadata": {
            "name": f"{service}-{address}",
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": manager,
            },
            "ownerReferences": [controller_ref("Service", owner or service)],
        },
        "addressType": "IPv4",
        "ports": [{"name": "control", "port": 9000}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
    }


def _shadow_spec() -> ParityCheckSpec:
    return ParityCheckSpec.model_validate(
        {
            "baseline": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "aaaaaaaaaa"},
            "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": "bbbbbbbbbb"},
            "source": "shadow",
            "shadow": {"minRequests": COPIES},
            "profile": PROFILE.value,
            "thresholds": {"minLongPrompts": 0},
            "disabledChecks": ["maxLogPerplexityRatio"],
        }
    )


def test_a_shadow_check_runs_under_the_suites_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies are judged under the gate's thresholds (no hidden-state limit, the stated
    long-prompt minimum) and disabled checks; both sides' records carry the runner's
    sampling fingerprints; the pod is given its share of the pair budget; enough agreeing
    copies pass."""
    pod = _pod(COPIES, greedy=COPIES)
    _Sessions.opened.clear()
    monkeypatch.setattr(
        shadow, "MirrorSessions", lambda urls, session: _Sessions(urls, session, pod)
    )
    runner, spec = _Runner(), _shadow_spec()
    shadow.run_shadow(runner, spec, sleep=lambda _: None)
    [body] = _Sessions.opened
    assert body["maxPairBytes"] == pair_budget(1)
    [report] = runner.reports
    judged_under = report["result"]["thresholds"]
    assert judged_under["minLongPrompts"] == 0
    assert all(v is None for k, v in judged_under.items() if "hidden" in k.lower())
    assert "maxLogPerplexityRatio" in report["result"]["disabled"]
    assert report["result"]["outputs"] == []  # no token ids in the report unless asked
    for side in ("baseline", "candidate"):
        assert body[side]["fingerprints"]["sampling.top_logprobs"] == spec.sampling.top_logprobs
    [(verdict, extra)] = runner.finished
    assert verdict.phase is CheckPhase.PASSED
    assert extra["shadow"]["scored"] == COPIES


def test_a_mirror_service_someone_else_made_ends_the_check_and_is_never_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A "mirror" a tenant put under the deployment's mirror name could report whatever
    copies it likes: its Service is refused for good, before any session is opened."""
    _Sessions.opened.clear()
    monkeypatch.setattr(
        shadow, "MirrorSessions", lambda urls, session: _Sessions(urls, session, _pod(COPIES))
    )
    runner = _Runner(mirror_owner=controller_ref("Deployment", "tenant-mirror"))
    with pytest.raises(shadow.ShadowError) as raised:
        shadow.run_shadow(runner, _shadow_spec(), sleep=lambda _: None)
    assert raised.value.reason == "SideObjectNotOurs"
    assert raised.value.retry is False
    message = str(raised.value)
    assert "Service qwen-mirror is not controlled by InferenceDeployment qwen (uid uid-qwen)" in (
        message
    )
    assert "its controller is Deployment tenant-mirror" in message
    assert _Sessions.opened == []
    assert runner.finished == []


@pytest.mark.parametrize(
    "forged",
    [
        mirror_slice("qwen-mirror", "127.0.0.66", manager="tenant"),
        mirror_slice("qwen-mirror", "127.0.0.66", owner="qwen-other"),
    ],
    ids=["another manager", "another Service"],
)
def test_a_mirror_pod_only_a_forged_slice_names_is_never_called(forged: dict[str, Any]) -> None:
    trusted = mirror_slice("qwen-mirror", "127.0.0.9")
    service = _Runner().mirror_service("qwen-mirror")[0]
    owner = Controller("InferenceDeployment", "qwen", uid_of("qwen"))
    urls = shadow.mirror_urls(service, [trusted, forged], "qwen-mirror", owner=owner)
    assert urls == ["http://127.0.0.9:9000"]
    with pytest.raises(shadow.ShadowError) as raised:
        shadow.mirror_urls(service, [forged], "qwen-mirror", owner=owner)
    assert raised.value.reason == "SideUnreachable"
    assert "1 untrusted EndpointSlices ignored" in str(raised.value)


# -- pooling: what one comparison over every pod decides, and what it refuses -------------


def _forged(change: Callable[[dict[str, Any]], Any]) -> Any:
    pod = copy.deepcopy(_pod(4, first=100, greedy=1))
    return change(pod)


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], Any]:
    def change(pod: dict[str, Any]) -> Any:
        target: Any = pod
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return pod

    return change


def _pair_doc(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], Any]:
    def changed(pod: dict[str, Any]) -> Any:
        change(pod["pairs"][0])
        return pod

    return changed


def _drop_last_pair(pod: dict[str, Any]) -> Any:
    pod["pairs"].pop()
    return pod


def _duplicate_id(pod: dict[str, Any]) -> Any:
    pod["pairs"][1] = copy.deepcopy(pod["pairs"][0])
    return pod


def _other_prompt(pair: dict[str, Any]) -> None:
    pair["forced"]["promptId"] = "m999999"


def _bad_base64(pair: dict[str, Any]) -> None:
    pair["baseline"]["output"]["data"] = "not base64!"


def _short_data(pair: dict[str, Any]) -> None:
    pair["baseline"]["prompt"]["shape"] = [13]


def _float_ids(pair: dict[str, Any]) -> None:
    pair["baseline"]["prompt"]["dtype"] = "float64"


def _not_forced(pair: dict[str, Any]) -> None:
    pair["forced"]["teacherForced"] = None


FORGED = {
    "not an object": lambda _: None,
    "a list": lambda pod: [pod],
    "no session": _set(("session",), None),
    "another session": _set(("session", "id"), "llm/other-check"),
    "another revision": _set(("session", "candidateRevision"), "cccccccccc"),
    "another baseline": _set(("session", "baseline"), meta(dtype="float16").model_dump()),
    "no candidate metadata": _set(("session", "candidate"), None),
    "more scored than pairs": _set(("counts", "scored"), 5),
    "a pair missing": _drop_last_pair,
    "a scored count that is no count": _set(("counts", "scored"), "4"),
    "a seen count that does not read": _set(("counts", "mirrored"), "many"),
    "refusals that do not read": _set(("counts", "refused"), ["poolFull"]),
    "greedy count forged": _set(("counts", "greedy"), 3),
    "no pairs": _set(("pairs",), None),
    "a prompt id twice": _duplicate_id,
    "a pair of two prompts": _pair_doc(_other_prompt),
    "bad base64": _pair_doc(_bad_base64),
    "data shorter than its shape": _pair_doc(_short_data),
    "token ids as floats": _pair_doc(_float_ids),
    "forced record not teacher-forced": _pair_doc(_not_forced),
}


@pytest.mark.parametrize("change", FORGED.values(), ids=FORGED.keys())
def test_a_pod_result_that_cannot_be_used_is_an_error_never_a_pass(
    change: Callable[[dict[str, Any]], Any],
) -> None:
    """Pod 0 alone has enough agreeing copies to pass; pod 1's result is forged, of another
    session or malformed: the check is Error, naming the pod, and nothing is judged."""
    verdict, shown, _ = judge_results(
        [_pod(COPIES), _forged(change)], ShadowSettings(min_requests=COPIES), _spec(2),
        profile=PROFILE.value, warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is CheckPhase.ERROR
    [reason] = [r for r in verdict.reasons if r.metric == "shadow.podResult"]
    assert reason.message is not None
    assert "mirror pod 1:" in reason.message
    assert "mirror pod 0" not in reason.message
    assert shown is None


def test_a_deep_model_without_its_own_noise_is_inconclusive_in_shadow_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Agreeing copies of a model deeper than the depth rule was measured at: a suite check
    of it needs its kept noise, and so does a shadow check; without it nothing passes."""
    pod = _pod(COPIES, greedy=COPIES)
    monkeypatch.setattr(
        shadow, "MirrorSessions", lambda urls, session: _Sessions(urls, session, pod)
    )
    shallow, deep = _Runner(layers=2), _Runner(layers=80)
    for runner in (shallow, deep):
        _Sessions.opened.clear()
        shadow.run_shadow(runner, _shadow_spec(), sleep=lambda _: None)
    assert shallow.finished[0][0].phase is CheckPhase.PASSED
    verdict = deep.finished[0][0]
    assert verdict.phase is CheckPhase.INCONCLUSIVE
    said = " ".join(r.message for r in verdict.reasons)
    assert "calibration needed" in said, said
    assert "80 layers" in said


def test_pairs_past_the_pods_budget_are_refused() -> None:
    pods = [_pod(COPIES, greedy=COPIES)]
    used = sum(pair_bytes(decode_pair(p)) for p in pods[0]["pairs"])
    assert _judge_with(pods, _spec(pair_bytes_per_pod=used)) is CheckPhase.PASSED
    assert _judge_with(pods, _spec(pair_bytes_per_pod=used - 1)) is CheckPhase.ERROR


def _judge_with(pods: list[Any], spec: PoolSpec) -> CheckPhase:
    verdict, _, _ = judge_results(
        pods, ShadowSettings(min_requests=COPIES), spec, profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    return verdict.phase


def test_the_same_sequence_numbers_on_two_pods_are_two_prompts() -> None:
    """Each pod numbers its copies from m000000; the runner keeps them apart by pod."""
    pooled = pool_results([_pod(COPIES // 2), _pod(COPIES // 2)], _spec(2))
    assert pooled.problems == []
    assert pooled.forced is not None
    ids = [p.prompt_id for p in pooled.forced.prompts]
    assert len(ids) == len(set(ids)) == COPIES
    assert {"p0/m000000", "p1/m000000"} <= set(ids)
    assert pooled.forced.errors == []


def test_counts_are_summed_over_the_pods() -> None:
    pods = [_pod(COPIES // 2, greedy=3), _pod(COPIES // 2, first=COPIES // 2, canary_failures=1)]
    _, _, totals = judge_results(
        pods, ShadowSettings(min_requests=COPIES), _spec(2), profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert (totals.mirrored, totals.sampled, totals.scored, totals.greedy) == (
        COPIES * 5, COPIES + 1, COPIES, 3,
    )  # fmt: skip
    assert totals.dropped == 1


def test_greedy_copies_are_pooled_too() -> None:
    """20 greedy copies per pod: too few on one pod (Inconclusive), enough on two, where
    the token-by-token comparison is judged and reported."""
    one = judge_results(
        [_pod(COPIES, greedy=COPIES // 2)], ShadowSettings(min_requests=COPIES), _spec(),
        profile=PROFILE.value, warn=PROFILES[PROFILE].warn,
    )[0]  # fmt: skip
    assert one.phase is CheckPhase.INCONCLUSIVE
    both = judge_results(
        [_pod(COPIES // 2, greedy=COPIES // 2),
         _pod(COPIES // 2, first=COPIES // 2, greedy=COPIES // 2)],
        ShadowSettings(min_requests=COPIES), _spec(2), profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )[0]  # fmt: skip
    assert both.phase is CheckPhase.PASSED
    assert not any("greedy copies" in w for w in both.warnings)
    assert both.metrics["greedyTokenMatchRate"] == 1.0


def test_a_drifting_canary_on_one_pod_fails_the_pooled_check() -> None:
    pods = [_pod(COPIES // 2), _pod(COPIES // 2, first=COPIES // 2, shift=-1.5)]
    assert _judge(pods) is CheckPhase.FAILED


def test_a_nan_on_one_pod_reaches_the_hygiene_check() -> None:
    nan = _pod(COPIES // 2, first=COPIES // 2)
    pair = decode_pair(nan["pairs"][0])
    forced = pair.forced.teacher_forced
    assert forced is not None
    scores = forced.top.logprobs.copy()
    scores[3, 0] = float("nan")
    broken = replace(pair.forced, top_logprobs=TopLogprobs(forced.top.token_ids, scores))
    nan["pairs"][0] = encode_pair(ScoredPair(pair.baseline, broken, None))
    assert _judge([_pod(COPIES // 2), nan]) is CheckPhase.FAILED


@pytest.mark.parametrize("store", [False, True])
def test_worst_outputs_reach_the_report_only_when_asked(store: bool) -> None:
    pods = [_pod(COPIES, shift=-1.5)]
    pooled = pool_results(pods, _spec(store_prompts=store))
    assert pooled.forced is not None
    assert bool(pooled.forced.outputs) is store


def test_running_out_of_pair_budget_says_so_when_evidence_is_short() -> None:
    pod = _pod(12)
    pod["counts"]["refused"]["poolFull"] = 30
    verdict, _, _ = judge_results(
        [pod], ShadowSettings(min_requests=COPIES), _spec(), profile=PROFILE.value,
        warn=PROFILES[PROFILE].warn,
    )  # fmt: skip
    assert verdict.phase is CheckPhase.INCONCLUSIVE
    [reason] = [r for r in verdict.reasons if r.metric == "shadow.minRequests"]
    assert reason.message is not None
    assert "poolFull" in reason.message


@pytest.mark.parametrize(
    ("pods", "each"),
    [(1, 32 * MIB), (4, 32 * MIB), (8, 16 * MIB), (16, 8 * MIB)],
)
def test_the_pair_budget_is_shared_by_the_pods(pods: int, each: int) -> None:
    assert pair_budget(pods) == each
    assert pods * pair_budget(pods) <= POOL_BYTES
    # base64 of the whole budget fits what the runner reads of a pod's result.
    assert response_limit(each) > each * 4 // 3


@pytest.mark.parametrize(
    ("answer", "retry"),
    [
        (httpx.Response(200, content=b"x" * 2048), False),  # larger than the runner reads
        (httpx.Response(404, json={"error": "no such session"}), True),  # a restarted pod
        (httpx.Response(200, content=b"{not json"), True),
    ],
    ids=["too large", "session lost", "not JSON"],
)
def test_a_pod_result_that_does_not_read_ends_the_attempt(
    answer: httpx.Response, retry: bool
) -> None:
    http = httpx.Client(transport=httpx.MockTransport(lambda _: answer))
    sessions = shadow.MirrorSessions(["http://127.0.0.9:9000"], SESSION, http)
    with pytest.raises(shadow.ShadowError) as raised:
        sessions.results(limit=1024)
    assert raised.value.retry is retry
    sessions.close()
