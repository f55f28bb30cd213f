"""The model's own noise in a run: never measured after a Passed check, read back as the
next check's limits, and Inconclusive when a profile needs a calibration that is not kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infergate.golden.blobs import DirectoryStore
from infergate.golden.errors import GoldenIntegrityError
from infergate.golden.noise import get_noise, noise_key, put_noise
from infergate.golden.store import GoldenStore
from infergate.parity.calibrated import FamilyNoise, ModelNoise, NoiseFamily
from infergate.runner.report_store import read_report
from infergate.runner.run import EXIT_DONE, run_check

from .fakes import ToyEngine
from .test_golden import FAST, options
from .test_run import BASE_URL, CAND_URL, PROBE_URL, cluster, status

STABLE, CANARY = "aaaaaaaaaa", "bbbbbbbbbb"


def _toy(layers: int | None, **kw: Any) -> ToyEngine:
    """A toy engine that reports `layers` as its depth (None: no depth)."""
    engine = ToyEngine(**kw)
    if layers is not None:
        engine.fingerprints["model_config.num_hidden_layers"] = layers
    return engine


def _engines(layers: int | None = None) -> Any:
    from .fakes import ToyConnector

    return ToyConnector(
        {
            BASE_URL: _toy(layers, adapter=False),
            PROBE_URL: _toy(layers, adapter=False),
            CAND_URL: _toy(layers),
        }
    )


def _result(api: Any) -> dict[str, Any]:
    report = read_report(api.config_maps["check-report"]["data"], {})
    document: dict[str, Any] = json.loads(report["result.json"])
    return document


def _store(root: Path) -> GoldenStore:
    return GoldenStore(DirectoryStore(root))


def _noise(kl: float, change: str | None = None) -> ModelNoise:
    table = {NoiseFamily.KL_MEAN: FamilyNoise(upper=kl, bounded=True, pairs=["aa"])}
    return ModelNoise(
        revision=STABLE, model="toy", engine="vllm", dtype="bfloat16", layers=None,
        suite_digest="sha256:x", prompts=32, measured="2026-12-07T00:00:00Z", method="test",
        self_noise=table, changes={change: table} if change else {},
    )  # fmt: skip


def test_a_passed_check_drives_nothing_after_its_verdict(tmp_path: Path) -> None:
    """Promotion never waits on a measurement: a Passed check that keeps its records asks
    the candidate no more than a check that keeps none, and keeps no self noise for it
    (the first check that needs it measures it, as its baseline:
    test_noise_measured.py)."""
    kept_engines, plain_engines = _engines(), _engines()
    api = cluster()
    assert run_check(api, "check", options(tmp_path), connector=kept_engines.connector()) == 0
    assert status(api)["phase"] == "Passed"
    assert status(api)["golden"]["stored"] is True
    plain = cluster()
    assert run_check(plain, "check", FAST, connector=plain_engines.connector()) == EXIT_DONE
    assert status(plain)["phase"] == "Passed"
    asked = kept_engines.engines[CAND_URL].completions
    assert asked == plain_engines.engines[CAND_URL].completions
    assert asked > 0
    assert get_noise(_store(tmp_path), "llm", "qwen", CANARY) is None


def test_the_baselines_kept_noise_sets_the_limits_and_the_report_says_how(tmp_path: Path) -> None:
    put_noise(_store(tmp_path), "llm", "qwen", _noise(2e-6, change="dtype float16"))
    api = cluster()
    assert run_check(api, "check", options(tmp_path), connector=_engines().connector()) == EXIT_DONE
    assert status(api)["phase"] == "Passed"
    result = _result(api)["result"]
    assert result["thresholds"]["maxMeanKl"] == 9 * 2e-6
    kl = next(p for p in result["calibration"]["provenance"] if p["key"] == "max_mean_kl")
    assert (kl["source"], kl["noise"], kl["k"]) == ("measured", 2e-6, 9.0)
    html = api.config_maps["check-report"]["data"]["report.html"]
    assert "Limits and power" in html
    assert "max_mean_kl 1.8e-05 = k 9 x noise 2e-06" in html
    assert "Positive control final norm x1.02: detected by" in html
    # The check's provenance line says so too: k and where the noise came from.
    assert result["limits"]["k"] == 3.0
    assert result["limits"]["source"].startswith("measured noise ('dtype float16' noise of toy")
    assert "k 3 x measured noise" in html


def test_without_the_expected_change_pair_the_static_limits_stand(tmp_path: Path) -> None:
    put_noise(_store(tmp_path), "llm", "qwen", _noise(2e-6))
    api = cluster()
    assert run_check(api, "check", options(tmp_path), connector=_engines().connector()) == EXIT_DONE
    result = _result(api)["result"]
    assert {p["source"] for p in result["calibration"]["provenance"]} == {"static"}
    assert "no 'dtype float16' pair kept" in result["calibration"]["calibration"]


def test_a_model_deeper_than_the_depth_rule_was_measured_needs_its_own_noise(
    tmp_path: Path,
) -> None:
    api = cluster()
    connector = _engines(layers=64).connector()
    assert run_check(api, "check", options(tmp_path), connector=connector) == EXIT_DONE
    s = status(api)
    assert s["phase"] == "Inconclusive"
    assert "calibration needed: the model has 64 layers" in json.dumps(s)


def test_a_corrupt_noise_record_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.blobs.put_bytes(noise_key("llm", "qwen", STABLE), b"{not json")
    with pytest.raises(GoldenIntegrityError, match="is not a noise record"):
        get_noise(store, "llm", "qwen", STABLE)
