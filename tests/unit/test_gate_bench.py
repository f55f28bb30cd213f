"""gate-bench's judging on synthetic records: the ladder, the verdicts, the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from infergate.recordio import RecordReader, RecordWriter
from tests.unit.parity.builders import RUN, meta, replace, scored_suite

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gate_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gate_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gate_bench"] = module
    spec.loader.exec_module(module)
    return module


def _write(path: Path, weights: str) -> None:
    # One "long" prompt (by tag, short in tokens): every prefix keeps it.
    prompts = [
        replace(p, tags={"long": "true"}) if p.prompt_id == "p64" else p
        for p in scored_suite(65, long=0, prompt_tokens=40, output_tokens=16)
    ]
    fingerprints = {**RUN, "weights.digest": weights}
    with RecordWriter(path, meta(fingerprints=fingerprints)) as writer:
        for p in prompts:
            writer.add(p)


def test_identical_records_pass_and_changed_weights_are_blocked_from_32_prompts(
    bench: ModuleType, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    _write(records / "base", "w0")
    _write(records / "same", "w0")
    _write(records / "changed", "w1")
    candidates = [
        bench.Candidate("aa", bench.B, "A/A", "base", "same", "strict"),
        bench.Candidate("weights", bench.H, "new weights (<|endoftext|> first)", "base",
                        "changed", "strict"),
    ]  # fmt: skip
    rows = bench.evaluate(candidates, tmp_path)
    aa, weights = rows
    assert [r["status"] for r in aa["ladder"]] == ["Inconclusive"] * 2 + ["Passed"] * 2
    assert aa["correct"]
    assert aa["promptsNeeded"] == 32
    assert weights["verdict"] == "Failed"
    assert weights["correct"]
    assert weights["promptsNeeded"] == 8, "hygiene needs no minimum evidence to fail"
    assert weights["numbersOnly"]["status"] == "Passed", "identical numbers: only hygiene sees it"
    kept = RecordReader(tmp_path / "prefix" / "base-8").prompt_ids
    assert len(kept) == 9
    assert "p64" in kept
    table = bench.to_markdown(rows, {"date": "today", "short": 64, "long": 4, "recordSeconds": 0,
                                     "judgeSeconds": 0})  # fmt: skip
    assert "**1/1 harmful blocked, 1/1 benign passed.**" in table
    assert "| weights | harmful | new weights (<\\|endoftext\\|> first) |" in table
    # Every row of the table has its ten cells, even with a `|` inside one.
    rows_md = [line for line in table.splitlines() if line.startswith(("| aa", "| weights"))]
    assert [line.replace("\\|", "").count("|") for line in rows_md] == [11, 11]
