"""`infergate parity calibrate --noise-out/--store`: the noise record a golden store keeps,
self pairs and dtype pairs apart, read back as a later check reads it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infergate.calibration.kept import model_noise
from infergate.cli import main
from infergate.golden.blobs import DirectoryStore
from infergate.golden.noise import get_noise
from infergate.golden.store import GoldenStore
from infergate.parity.calibrated import NoiseFamily
from infergate.parity.record import TeacherForced, TopLogprobs
from infergate.recordio import RecordWriter
from tests.unit.parity.builders import meta, replace, suite, teacher_forced_on


def _write(folder: Path, dtype: str, shift: float) -> Path:
    with RecordWriter(folder, meta(dtype=dtype)) as writer:
        for p in suite(6):
            forced = teacher_forced_on(p)
            if shift:
                top = forced.top
                forced = TeacherForced(
                    forced.token_ids, forced.target_logprobs + shift,
                    TopLogprobs(top.token_ids, top.logprobs + shift),
                )  # fmt: skip
            hidden = None if p.hidden_states is None else p.hidden_states * np.float32(1 + shift)
            writer.add(replace(p, teacher_forced=forced, hidden_states=hidden))
    return folder


def _report(label: str, base: str, cand: str, kl: float) -> dict[str, object]:
    return {
        "label": label, "prompts": 40, "layers": 28,
        "baseline": {"model": "m", "engine": "vllm", "dtype": base},
        "candidate": {"model": "m", "engine": "vllm", "dtype": cand},
        "noise": {"logprobs.meanKl": {"upper": kl, "bounded": True}},
    }  # fmt: skip


def test_self_pairs_and_dtype_pairs_are_kept_apart() -> None:
    noise = model_noise(
        [
            _report("again", "bfloat16", "bfloat16", 1e-6),
            _report("concurrency 16", "bfloat16", "bfloat16", 3e-6),
            _report("fp32", "bfloat16", "float32", 5e-5),
        ],
        revision="aaaaaaaaaa", digest="sha256:x", measured="now", method="test",
    )  # fmt: skip
    assert noise.self_noise[NoiseFamily.KL_MEAN].upper == 3e-6
    assert noise.self_noise[NoiseFamily.KL_MEAN].pairs == ["again", "concurrency 16"]
    assert noise.changes["dtype float32"][NoiseFamily.KL_MEAN].upper == 5e-5
    assert (noise.layers, noise.dtype, noise.prompts) == (28, "bfloat16", 40)


def test_no_pairs_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one measured pair"):
        model_noise([], revision=None, digest="d", measured="now", method="m")


def test_the_command_keeps_the_noise_record_where_a_later_check_reads_it(tmp_path: Path) -> None:
    base = _write(tmp_path / "base", "bfloat16", 0.0)
    again = _write(tmp_path / "again", "bfloat16", 0.0)
    fp32 = _write(tmp_path / "fp32", "float32", 0.01)
    out, store = tmp_path / "noise.json", tmp_path / "store"
    argv = [
        "parity", "calibrate", "--pair", f"aa={base}:{again}", "--pair", f"fp32={base}:{fp32}",
        "--noise-out", str(out), "--store", str(store), "--namespace", "llm",
        "--deployment", "qwen", "--revision", "aaaaaaaaaa",
    ]  # fmt: skip
    assert main(argv) == 0
    kept = get_noise(GoldenStore(DirectoryStore(store)), "llm", "qwen", "aaaaaaaaaa")
    assert kept is not None
    assert kept.model_dump(mode="json", by_alias=True) == json.loads(out.read_text())
    assert kept.self_noise[NoiseFamily.KL_MEAN].upper == 0.0
    assert kept.changes["dtype float32"][NoiseFamily.HIDDEN_REL_L2].upper == pytest.approx(
        0.01, rel=1e-3
    )


def test_store_without_its_deployment_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = _write(tmp_path / "base", "bfloat16", 0.0)
    argv = ["parity", "calibrate", "--pair", f"{base}:{base}", "--store", str(tmp_path / "s")]
    assert main(argv) == 2
    assert "--store needs --namespace, --deployment and --revision" in capsys.readouterr().err
