"""Noise the runner measures where none is kept: the baseline revision's own before the
first check whose limits read it, and a Passed dtype-change check's pair as that expected
change's noise (kept without driving anything after the verdict).

The first revision of a deployment is never a candidate, so no Passed check measured it:
its first canary check measures it, keeps it, and is judged by it, once. A store that
fails leaves the check under the limits it would have had, never Passed because of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infergate.calibration.kept import change_pair_refusal
from infergate.golden.errors import GoldenUnavailableError
from infergate.golden.noise import get_noise, put_noise
from infergate.parity.calibrated import (
    DEEPEST_MEASURED_LAYERS,
    ENVELOPE_FAMILIES,
    ENVELOPE_SOURCE,
    NoiseFamily,
)
from infergate.parity.gate_limits import noise_limits
from infergate.parity.profiles import plan_gate
from infergate.parity.record import RecordMeta
from infergate.parity.thresholds import ProfileName
from infergate.runner.run import EXIT_DONE, run_check

from .fakes import FakeApi, ToyConnector
from .test_golden import options
from .test_noise import CANARY, STABLE, _noise, _result, _store, _toy
from .test_run import (
    BASE_IP,
    BASE_URL,
    CAND_IP,
    CAND_URL,
    PROBE_IP,
    PROBE_URL,
    cluster,
    engines,
    spec,
    status,
)

CAND_PROBE_IP = "127.64.0.13"
CAND_PROBE_URL = f"http://{CAND_PROBE_IP}:8000"
DEEP = DEEPEST_MEASURED_LAYERS + 2
"""Deeper than the static limits' depth rule was measured at, and shallow enough that the
positive control is still seen under those limits scaled there."""


NEXT = "cccccccccc"
"""The revision after CANARY, once CANARY is stable."""


def _cluster(
    profile: str, dtypes: tuple[str, str], engine: str = "vllm", name: str = "check",
    revisions: tuple[str, str] = (STABLE, CANARY),
) -> FakeApi:  # fmt: skip
    """Two `revisions` (stable, canary) of one deployment, `dtypes` (baseline, candidate),
    one `engine`."""
    stable, canary = revisions
    api = FakeApi()
    api.deployments["qwen"] = {
        "metadata": {"name": "qwen", "uid": "uid-qwen"},
        "status": {"stableRevision": stable, "revisions": [{"hash": stable}, {"hash": canary}]},
    }
    api.add_revision("qwen", stable, engine=engine, dtype=dtypes[0], ip=BASE_IP)
    api.add_revision("qwen", canary, engine=engine, dtype=dtypes[1], ip=CAND_IP)
    if engine == "vllm":
        api.add_probe(name, "baseline", PROBE_IP)
        api.add_probe(name, "candidate", CAND_PROBE_IP)
    api.add_check(
        name,
        spec(
            profile=profile,
            baseline={"inferenceDeploymentRef": {"name": "qwen"}, "revision": stable},
            candidate={"inferenceDeploymentRef": {"name": "qwen"}, "revision": canary},
        ),
    )
    return api


def _engines(layers: int | None = None, **candidate: Any) -> ToyConnector:
    """Toy engines: vLLM-like sides with their probes, or adapters; `layers` deep."""
    return ToyConnector(
        {
            BASE_URL: _toy(layers, adapter=False),
            PROBE_URL: _toy(layers, adapter=False),
            CAND_URL: _toy(layers, adapter=False, **candidate),
            CAND_PROBE_URL: _toy(layers, adapter=False, **candidate),
        }
    )


def _calibration(api: FakeApi) -> str:
    text: str = _result(api)["result"]["calibration"]["calibration"]
    return text


def test_the_first_revision_is_measured_before_its_first_check_and_judges_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model deeper than the static limits' depth rule was measured at needs its own
    noise: without it, its first canary check is Inconclusive. The baseline revision has none kept
    (it was never a candidate), so the check measures it first, keeps it, and is judged
    by it: Passed, and the report says the noise was measured for this check."""
    api = _cluster("bf16-kernel", ("bfloat16", "bfloat16"))
    connector = _engines(layers=DEEP).connector()
    assert run_check(api, "check", options(tmp_path), connector=connector) == EXIT_DONE
    assert status(api)["phase"] == "Passed"
    kept = get_noise(_store(tmp_path), "llm", "qwen", STABLE)
    assert kept is not None
    assert kept.layers == DEEP
    assert "runner for check check, measured before its limits (none was kept)" in kept.method
    assert "self vs self at concurrency 1 (the check ran 2)" in kept.method
    assert kept.self_noise[NoiseFamily.KL_MEAN].upper == 0.0  # the toy engine is deterministic
    assert _calibration(api).startswith("self noise of fixture (runner for check check, measured")
    log = capsys.readouterr().out
    assert f"self noise of baseline revision {STABLE} measured now for this check" in log
    # `kubectl get paritycheck -o wide` shows what the prompts are driven for meanwhile.
    stages = [w["progress"] for w in api.status_writes if "stage" in w.get("progress", {})]
    total = stages[-1]["total"]
    assert {"done": total, "total": total, "stage": "BaselineNoise"} in stages
    assert stages[-1] == {"done": total, "total": total, "stage": "Suite"}
    first_suite = next(i for i, p in enumerate(stages) if p["stage"] == "Suite")
    assert all(p["stage"] == "BaselineNoise" for p in stages[:first_suite])

    # The next check against the same baseline finds it kept: it is not measured again.
    again = _cluster("bf16-kernel", ("bfloat16", "bfloat16"))
    assert run_check(again, "check", options(tmp_path), connector=connector) == EXIT_DONE
    assert "measuring it now" not in capsys.readouterr().out
    assert get_noise(_store(tmp_path), "llm", "qwen", STABLE) == kept
    assert status(again)["phase"] == "Passed"


def test_a_kept_record_is_not_measured_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put_noise(_store(tmp_path), "llm", "qwen", _noise(2e-6))
    api = _cluster("bf16-kernel", ("bfloat16", "bfloat16"))
    assert run_check(api, "check", options(tmp_path), connector=_engines().connector()) == 0
    assert "measuring it now" not in capsys.readouterr().out
    assert get_noise(_store(tmp_path), "llm", "qwen", STABLE) == _noise(2e-6)
    assert _calibration(api).startswith("self noise of toy (test,")


def test_the_baseline_record_is_read_once_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurement step and the limits take the same record: one read of the store."""
    import infergate.runner.noise as noise_module

    put_noise(_store(tmp_path), "llm", "qwen", _noise(2e-6))
    reads: list[str] = []

    def counted(store: Any, namespace: str, deployment: str, revision: str) -> Any:
        reads.append(revision)
        return get_noise(store, namespace, deployment, revision)

    monkeypatch.setattr(noise_module, "get_noise", counted)
    api = _cluster("bf16-kernel", ("bfloat16", "bfloat16"))
    assert run_check(api, "check", options(tmp_path), connector=_engines().connector()) == 0
    assert reads == [STABLE]
    assert _calibration(api).startswith("self noise of toy (test,")


def test_a_profile_whose_limits_take_no_self_noise_measures_none(tmp_path: Path) -> None:
    """A dtype-change check is judged by the change's own pair, never by self noise:
    measuring the baseline would change nothing in it."""
    api = _cluster("dtype-change", ("float32", "bfloat16"))
    assert run_check(api, "check", options(tmp_path), connector=_engines().connector()) == 0
    assert get_noise(_store(tmp_path), "llm", "qwen", STABLE) is None


def test_a_check_its_fingerprints_already_fail_measures_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The candidate's config differs where a bf16 kernel change may not: the check
    Fails whatever its limits, so the baseline's missing noise is not measured for it."""
    api = _cluster("bf16-kernel", ("bfloat16", "bfloat16"))
    connector = _engines(layers=DEEP)
    connector.engines[CAND_URL].fingerprints["model_config.rms_norm_eps"] = 1e-5
    connector.engines[CAND_PROBE_URL].fingerprints["model_config.rms_norm_eps"] = 1e-5
    assert run_check(api, "check", options(tmp_path), connector=connector.connector()) == 0
    assert status(api)["phase"] == "Failed"
    log = capsys.readouterr().out
    assert f"self noise of baseline revision {STABLE} not measured: the runs' config" in log
    assert "measuring it now" not in log
    assert get_noise(_store(tmp_path), "llm", "qwen", STABLE) is None


def test_a_store_that_fails_leaves_the_check_without_it_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: the noise is measured but cannot be kept, so the deep check is
    judged as it would have been without it (Inconclusive), never Passed on it."""

    def down(*_: Any, **__: Any) -> str:
        raise GoldenUnavailableError("the store is down")

    monkeypatch.setattr("infergate.runner.noise.put_noise", down)
    api = _cluster("bf16-kernel", ("bfloat16", "bfloat16"))
    connector = _engines(layers=DEEP).connector()
    assert run_check(api, "check", options(tmp_path), connector=connector) == EXIT_DONE
    assert status(api)["phase"] == "Inconclusive"
    assert f"calibration needed: the model has {DEEP} layers" in json.dumps(status(api))
    assert _calibration(api) == "none kept for the baseline's revision"
    assert {p["source"] for p in _result(api)["result"]["calibration"]["provenance"]} == {"static"}
    log = capsys.readouterr().out
    assert (
        f"self noise of baseline revision {STABLE} not measured or not kept: the store is "
        "down; this check's limits do without it"
    ) in log
    assert get_noise(_store(tmp_path), "llm", "qwen", STABLE) is None


def test_a_passed_dtype_change_of_one_set_of_weights_keeps_its_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """float32 -> bfloat16 on the same weights and engine Passed: the candidate's record
    keeps the check's own pair as `dtype float32`, the change back to its baseline's
    dtype, with no self noise (nothing is driven after the verdict); a later bf16 kernel
    check against that revision finds it as its envelope, measures the self noise it
    lacks before its limits, and keeps both in one record."""
    api = _cluster("dtype-change", ("float32", "bfloat16"))
    connector = _engines(shift=-1e-3).connector()
    assert run_check(api, "check", options(tmp_path), connector=connector) == EXIT_DONE
    assert status(api)["phase"] == "Passed"
    kept = get_noise(_store(tmp_path), "llm", "qwen", CANARY)
    assert kept is not None
    assert kept.dtype == "bfloat16"
    assert kept.self_noise == {}
    assert "self noise not measured yet" in kept.method
    pair = kept.changes["dtype float32"]
    assert set(pair) <= ENVELOPE_FAMILIES  # the decode families are the candidate's own
    assert pair[NoiseFamily.KL_MEAN].upper > 0
    assert pair[NoiseFamily.KL_MEAN].pairs == ["float32 vs bfloat16, check check"]

    meta = RecordMeta(
        engine="vllm", engine_version="0.32.0", dtype="bfloat16", config_hash=CANARY,
        model="fixture", suite="inline",
    )  # fmt: skip
    gate = plan_gate(meta, meta, profile=ProfileName.BF16_KERNEL)
    limits = noise_limits(gate, "bfloat16", kept, None)
    assert limits.calibration.startswith("'dtype float32' pair of fixture as the bf16 envelope")
    kl = next(p for p in limits.provenance if p.key == "max_mean_kl")
    assert kl.source == "measured"
    assert kl.noise == pair[NoiseFamily.KL_MEAN].upper
    assert ENVELOPE_SOURCE in kl.note

    # CANARY is stable now; the next check, a bf16 kernel change, reads its record.
    capsys.readouterr()
    later = _cluster("bf16-kernel", ("bfloat16", "bfloat16"), revisions=(CANARY, NEXT))
    assert run_check(later, "check", options(tmp_path), connector=_engines().connector()) == 0
    assert status(later)["phase"] == "Passed"
    assert f"no self noise kept for baseline revision {CANARY}: measuring it" in (
        capsys.readouterr().out
    )
    both = get_noise(_store(tmp_path), "llm", "qwen", CANARY)
    assert both is not None
    assert both.self_noise
    assert both.changes == kept.changes
    assert _calibration(later).startswith("'dtype float32' pair of fixture as the bf16 envelope")


def _unweighed() -> ToyConnector:
    connector = _engines()
    for toy in connector.engines.values():
        toy.fingerprints.pop("weights.digest")
    return connector


@pytest.mark.parametrize(
    ("api", "connector", "why"),
    [
        (lambda: _cluster("bf16-kernel", ("bfloat16", "bfloat16")), _engines, None),
        (
            lambda: _cluster("dtype-change", ("float32", "bfloat16")),
            _unweighed,
            (
                "this check's pair not kept as the 'dtype float32' noise of the candidate: the "
                "baseline reports no weights.digest"
            ),
        ),
        (  # vLLM bfloat16 against MindFormers float16, the same weights
            cluster,
            engines,
            (
                "this check's pair not kept as the 'dtype bfloat16' noise of the candidate: the "
                "engines differ"
            ),
        ),
    ],
)
def test_no_pair_is_kept_unless_the_check_is_one_set_of_weights_under_two_dtypes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    api: Callable[[], FakeApi],
    connector: Callable[[], ToyConnector],
    why: str | None,
) -> None:
    """Another profile keeps no pair (silently); a dtype-change check whose weights are
    not shown to be the same, or whose engines differ too, keeps none, and the log says
    why. Nothing is kept for the candidate then."""
    cluster_api = api()
    assert (
        run_check(cluster_api, "check", options(tmp_path), connector=connector().connector()) == 0
    )
    assert status(cluster_api)["phase"] == "Passed"
    assert get_noise(_store(tmp_path), "llm", "qwen", CANARY) is None
    log = capsys.readouterr().out
    if why is None:
        assert "this check's pair not kept" not in log
    else:
        assert why in log


def _meta(dtype: str, weights: str | None = "w-1", **fields: Any) -> RecordMeta:
    prints = {} if weights is None else {"weights.digest": weights}
    values: dict[str, Any] = {
        "engine": "vllm", "engine_version": "0.32.0", "dtype": dtype, "config_hash": "r",
        "model": "fixture", "suite": "inline", "fingerprints": prints, **fields,
    }  # fmt: skip
    return RecordMeta(**values)


@pytest.mark.parametrize(
    ("baseline", "candidate", "confidence", "why"),
    [
        (_meta("float32"), _meta("bfloat16"), 0.95, None),
        (_meta("float32"), _meta("bfloat16"), None, None),
        (_meta("float32"), _meta("bfloat16", "w-2"), 0.95, "the weights differ"),
        (_meta("float32", None), _meta("bfloat16"), 0.95, "the baseline reports no"),
        (_meta("float32"), _meta("bfloat16", None), 0.95, "the candidate reports no"),
        (_meta("bfloat16"), _meta("bfloat16"), 0.95, "not two known dtypes"),
        (_meta("unknown"), _meta("bfloat16"), 0.95, "not two known dtypes"),
        (_meta("float32"), _meta("bfloat16", engine_version="0.33.0"), 0.95, "engines differ"),
        (
            _meta("float32", fingerprints={"weights.digest": "w-1", "versions.torch": "2.8"}),
            _meta("bfloat16", fingerprints={"weights.digest": "w-1", "versions.torch": "2.9"}),
            0.95,
            "engines differ",
        ),
        (_meta("float32"), _meta("bfloat16"), 0.99, "confidence 0.99"),
    ],
)
def test_the_expected_change_pair_is_one_set_of_weights_under_two_dtypes(
    baseline: RecordMeta, candidate: RecordMeta, confidence: float | None, why: str | None
) -> None:
    refused = change_pair_refusal(baseline, candidate, confidence)
    if why is None:
        assert refused is None
    else:
        assert refused is not None
        assert why in refused
