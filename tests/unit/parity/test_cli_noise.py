"""`infergate parity compare --noise`: limits from the baseline's kept noise, as the runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infergate.cli import main
from infergate.parity.calibrated import FamilyNoise, ModelNoise, NoiseFamily
from infergate.parity.record import PromptRecord
from infergate.recordio import RecordWriter

from .builders import RUN, SIDE_FINGERPRINTS, candidate_of, meta, scored_suite

DEEP = {"model_config.num_hidden_layers": 36}
"""Deeper than the 28 layers the static limits' depth rule was measured at."""


def _noise(
    path: Path, kl_mean: float, *, dtype: str = "float32", layers: int = 2, aa: bool = False
) -> str:
    """A kept record of a float32 stable: bfloat16 on the same weights, and with `aa` its
    A/A noise (the same table)."""
    family = {
        NoiseFamily.KL_MEAN: FamilyNoise(
            upper=kl_mean, observed=kl_mean / 2, bounded=True, pairs=["bf16-vs-fp32"]
        )
    }
    other = "bfloat16" if dtype == "float32" else "float32"
    noise = ModelNoise(
        model="tiny-qwen", engine="vllm", dtype=dtype, layers=layers, suite_digest="suite-0",
        prompts=36, measured="2026-12-07T00:00:00+00:00", method="test",
        self_noise=family if aa else {}, changes={f"dtype {other}": family},
    )  # fmt: skip
    path.write_text(noise.model_dump_json(by_alias=True))
    return str(path)


def _write(path: Path, prompts: list[PromptRecord], **fingerprints: object) -> str:
    with RecordWriter(path, meta(fingerprints={**SIDE_FINGERPRINTS, **RUN, **fingerprints})) as w:
        for p in prompts:
            w.add(p)
    return str(path)


@pytest.fixture(scope="module")
def prompts() -> list[PromptRecord]:
    return scored_suite()


@pytest.fixture
def near(tmp_path: Path, prompts: list[PromptRecord]) -> tuple[str, str]:
    """A bf16-kernel pair with mean KL 2.6e-5: inside the static 1e-4."""
    return (
        _write(tmp_path / "baseline", prompts),
        _write(tmp_path / "candidate", [candidate_of(p, -0.001) for p in prompts]),
    )


def _compare(baseline: str, candidate: str, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["parity", "compare", baseline, candidate, "--json", str(out), *extra])
    return code, json.loads(out.read_text())


def test_with_a_noise_record_the_limits_are_k_times_its_noise(
    near: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "static.json"
    assert _compare(*near, out)[0] == 0
    noise = _noise(tmp_path / "noise.json", 1e-6)
    code, document = _compare(*near, tmp_path / "calibrated.json", "--noise", noise)
    assert code == 1
    assert document["status"] == "Failed"
    assert any(str(r).startswith("maxMeanKl") for r in document["verdict"]["reasons"])
    result = document["result"]
    limit = next(p for p in result["calibration"]["provenance"] if p["key"] == "max_mean_kl")
    assert limit["source"] == "measured"
    assert limit["value"] == pytest.approx(9e-6)
    assert result["limits"]["source"].startswith("measured noise")
    printed = capsys.readouterr().out
    assert "  limits: max_mean_kl 9e-06 = k 9 x noise 1e-06" in printed
    assert "  limits: Calibration: 'dtype bfloat16' pair of tiny-qwen as the bf16 envelope" in (
        printed
    )


def test_a_looser_noise_record_passes_what_the_static_limits_pass(
    near: tuple[str, str], tmp_path: Path
) -> None:
    noise = _noise(tmp_path / "noise.json", 5e-5)
    code, document = _compare(*near, tmp_path / "out.json", "--noise", noise)
    assert code == 0
    assert document["status"] == "Passed"


def test_an_explicit_threshold_stays_as_set(near: tuple[str, str], tmp_path: Path) -> None:
    noise = _noise(tmp_path / "noise.json", 1e-6)
    code, document = _compare(
        *near, tmp_path / "out.json", "--noise", noise, "--threshold", "maxMeanKl=1e-4"
    )
    assert code == 0
    result = document["result"]
    limit = next(p for p in result["calibration"]["provenance"] if p["key"] == "max_mean_kl")
    assert limit["source"] == "explicit"


def test_without_a_noise_record_the_static_limits_judge(
    near: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = _compare(*near, tmp_path / "out.json")
    assert code == 0
    result = document["result"]
    assert result["limits"]["source"] == "static profile"
    assert result["calibration"]["calibration"] == "none kept for the baseline's revision"
    assert {p["source"] for p in result["calibration"]["provenance"]} == {"static"}
    assert (
        "  limits: Calibration: none kept for the baseline's revision." in capsys.readouterr().out
    )


def test_a_deep_model_without_noise_is_inconclusive(
    tmp_path: Path, prompts: list[PromptRecord]
) -> None:
    baseline = _write(tmp_path / "b", prompts, **DEEP)
    candidate = _write(tmp_path / "c", [candidate_of(p) for p in prompts], **DEEP)
    code, document = _compare(baseline, candidate, tmp_path / "static.json")
    assert code == 3
    assert document["status"] == "Inconclusive"
    reasons = document["verdict"]["reasons"]
    assert any("calibration needed: the model has 36 layers" in r for r in reasons)
    # A record keeping the bf16 envelope alone leaves the families it does not cover
    # (decode) on static limits extrapolated past 28 layers: still Inconclusive.
    pair = _noise(tmp_path / "pair.json", 1e-6, layers=36)
    code, document = _compare(baseline, candidate, tmp_path / "pair-only.json", "--noise", pair)
    assert code == 3
    assert any("no self noise measured" in r for r in document["verdict"]["reasons"])
    noise = _noise(tmp_path / "noise.json", 1e-6, layers=36, aa=True)
    code, document = _compare(baseline, candidate, tmp_path / "calibrated.json", "--noise", noise)
    assert code == 0
    assert document["status"] == "Passed"


def test_an_unreadable_noise_record_is_an_error(near: tuple[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "noise.json"
    bad.write_text("{}")
    code, document = _compare(*near, tmp_path / "out.json", "--noise", str(bad))
    assert code == 2
    assert "--noise" in str(document["reasons"])


def test_the_report_says_the_limits_come_from_the_kept_noise(
    near: tuple[str, str], tmp_path: Path
) -> None:
    noise = _noise(tmp_path / "noise.json", 1e-6)
    report = tmp_path / "report.html"
    main(["parity", "compare", *near, "--noise", noise, "--report", str(report)])
    html = report.read_text()
    assert "Limits and power" in html
    assert "max_mean_kl 9e-06 = k 9 x noise 1e-06" in html
