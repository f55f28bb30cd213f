"""gate-bench's judging on synthetic records: the ladder, the verdicts, the table."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from infergate.parity.profiles import PROFILES
from infergate.parity.thresholds import ProfileName
from infergate.recordio import RecordReader, RecordWriter
from tests.unit.parity.builders import RUN, meta, replace, scored_suite
from tests.unit.scripts import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench/gate_bench.py")


def _write(path: Path, weights: str, tokens: int = 16) -> None:
    # One "long" prompt (by tag, short in tokens): every prefix keeps it.
    prompts = [
        replace(p, tags={"long": "true"}) if p.prompt_id == "p64" else p
        for p in scored_suite(65, long=0, prompt_tokens=40, output_tokens=tokens)
    ]
    fingerprints = {**RUN, "weights.digest": weights, "sampling.max_tokens": tokens}
    with RecordWriter(path, meta(fingerprints=fingerprints)) as writer:
        for p in prompts:
            writer.add(p)


def test_identical_records_pass_and_changed_weights_are_blocked_from_32_prompts(
    bench: ModuleType, tmp_path: Path
) -> None:
    for key, weights in (("base", "w0"), ("same", "w0"), ("changed", "w1")):
        _write(bench.record_dir(tmp_path, key, 16), weights)
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
    kept = RecordReader(tmp_path / "prefix" / "base.16tok-8").prompt_ids
    assert len(kept) == 9
    assert "p64" in kept
    table = bench.to_markdown(rows, {"date": "today", "short": 64, "long": 4, "recordSeconds": 0,
                                     "judgeSeconds": 0})  # fmt: skip
    assert "**1/1 harmful blocked, 1/1 benign passed.**" in table
    assert "| weights | harmful | new weights (<\\|endoftext\\|> first) |" in table
    # Every row of the table has its ten cells, even with a `|` inside one.
    static, calibrated = table.split("## Calibrated limits")
    rows_md = [line for line in static.splitlines() if line.startswith(("| aa", "| weights"))]
    assert [line.replace("\\|", "").count("|") for line in rows_md] == [12, 12]
    # Judged again with the kept noise: none kept for these stables, so static, and said.
    assert "**Calibrated: 1/1 harmful blocked, 1/1 benign passed.**" in calibrated
    assert "| aa | benign | strict | base | Passed | static: no noise kept for base | Passed |" in (
        calibrated
    )


# ------------------------------------------------------------- generated tokens


def test_a_profile_needs_as_many_output_tokens_as_its_fork_horizon(bench: ModuleType) -> None:
    fp32 = PROFILES[ProfileName.FP32_CROSS_FRAMEWORK].block.min_first_divergence_p10
    assert fp32 == 64
    assert bench.profile_tokens("fp32-cross-framework") == 64
    assert bench.profile_tokens("bf16-kernel") == bench.MAX_TOKENS == 16, "horizon 16: enough"
    assert bench.profile_tokens("strict") == 16, "no fork rule: the bench's default"


def test_sides_compared_or_forced_on_a_64_token_side_generate_64_and_no_others(
    bench: ModuleType,
) -> None:
    tokens = bench.side_tokens()
    cross = [c for c in bench.CANDIDATES if c.profile == "fp32-cross-framework"]
    assert {c.name for c in cross} == {"vllm-vs-transformers", "mindformers-vs-transformers"}
    for candidate in cross:
        assert tokens[candidate.baseline] == tokens[candidate.candidate] == 64
    # Forced on tf32, so asked what tf32 was asked (sampling.max_tokens must agree).
    assert tokens["tf32-again@tf32"] == tokens["tf-bf16@tf32"] == tokens["tf16@tf32"] == 64
    assert {k for k, n in tokens.items() if n == 64} == {
        "tf32", "vllm32@tf32", "tf32-again@tf32", "tf-bf16@tf32", "tf16@tf32", "mf32", "tf32@mf32",
    }  # fmt: skip
    assert set(tokens) == {s.key for s in bench.SIDES}
    assert tokens["vllm32"] == tokens["vllm-bf16@vllm32"] == 16, "vLLM fp32 vs bf16: its own 16"
    assert tokens["tf-bf16"] == tokens["tf-bf16-eps@tf-bf16"] == 16


def test_the_count_follows_teacher_forcing_chains_and_takes_the_largest_need(
    bench: ModuleType,
) -> None:
    sides = [
        bench.Side("a", "transformers", "float32"),
        bench.Side("b@a", "transformers", "float32", against="a"),
        bench.Side("c@b", "transformers", "bfloat16", against="b@a"),
        bench.Side("d", "transformers", "bfloat16"),
        bench.Side("e@d", "transformers", "bfloat16", against="d"),
    ]
    candidates = [
        bench.Candidate("cross", bench.B, "", "a", "b@a", "fp32-cross-framework"),
        bench.Candidate("kernel", bench.B, "", "d", "e@d", "bf16-kernel"),
    ]
    assert bench.side_tokens(candidates, sides) == {"a": 64, "b@a": 64, "c@b": 64, "d": 16,
                                                    "e@d": 16}  # fmt: skip
    # A candidate joining the two groups brings d and e@d to 64 as well.
    joined = [*candidates, bench.Candidate("x", bench.B, "", "d", "c@b", "dtype-change")]
    assert set(bench.side_tokens(joined, sides).values()) == {64}


def test_a_record_made_with_another_token_count_is_not_reused(
    bench: ModuleType, tmp_path: Path
) -> None:
    # The earlier bench's tf32 record (16 tokens) is not where a 64-token tf32 lives.
    _write(bench.record_dir(tmp_path, "tf32", 16), "w0", tokens=16)
    assert bench.record_dir(tmp_path, "tf32").name == "tf32.64tok"
    assert not bench._done(tmp_path, "tf32"), "recorded again, at 64 tokens"
    # A record under the right name but made with another count is refused, not used.
    _write(bench.record_dir(tmp_path, "tf32"), "w0", tokens=16)
    with pytest.raises(bench.StaleRecordError, match="16 output tokens, the bench asks 64"):
        bench._done(tmp_path, "tf32")
    _write(bench.record_dir(tmp_path, "tf-bf16"), "w0", tokens=16)
    assert bench._done(tmp_path, "tf-bf16")


def test_the_fork_rule_is_judged_at_64_tokens_and_inconclusive_at_16(
    bench: ModuleType, tmp_path: Path
) -> None:
    rows = {}
    for tokens in (16, 64):
        for key in ("base", "again"):
            _write(bench.record_dir(tmp_path, key, tokens), "w0", tokens=tokens)
        candidate = bench.Candidate("aa", bench.B, "A/A", "base", "again", "fp32-cross-framework")
        rung = bench.judge(candidate, tmp_path, 64, tokens=tokens)
        rows[tokens] = rung
    assert "minFirstDivergenceP10" in rows[16]["inconclusive"]
    assert rows[16]["status"] == "Inconclusive"
    # At 64 the rule is decided (the rest waits for long prompts this synthetic suite lacks).
    assert "minFirstDivergenceP10" not in rows[64]["inconclusive"] + rows[64]["failing"]
    verdict = json.loads((tmp_path / "verdicts" / "aa-64tok-64.json").read_text())["verdict"]
    p10 = next(c for c in verdict["checks"] if c["key"] == "minFirstDivergenceP10")
    assert p10["outcome"] == "pass"


def test_a_run_of_some_rows_keeps_the_others_and_names_them(bench: ModuleType) -> None:
    def row(name: str, verdict: str, **extra: object) -> dict[str, object]:
        kind = next(c.kind for c in bench.CANDIDATES if c.name == name)
        return {
            "name": name, "kind": kind, "change": "-", "profile": "strict", "verdict": verdict,
            "correct": verdict == ("Passed" if kind == bench.B else "Failed"), "reasons": [],
            "failing": [], "inconclusive": [], "hygiene": [], "closest": None,
            "numbersOnly": {"status": "Passed", "failing": [], "inconclusive": [],
                            "closest": None},
            "promptsNeeded": 32, "ladder": [{"prompts": 64, "status": verdict}], **extra,
        }  # fmt: skip

    previous = {
        "meta": {"date": "2026-12-03"},
        "rows": [row("eps-1e-5", "Failed"), row("vllm-vs-transformers", "Inconclusive")],
    }
    rows = bench.merge_rows([row("vllm-vs-transformers", "Passed", maxTokens=64)], previous,
                            "2026-12-04")  # fmt: skip
    assert [(r["name"], r["verdict"], r["run"]) for r in rows] == [
        ("eps-1e-5", "Failed", "2026-12-03"),
        ("vllm-vs-transformers", "Passed", "2026-12-04"),
    ]
    table = bench.to_markdown(rows, {"date": "2026-12-04", "short": 64, "long": 4,
                                     "recordSeconds": 0, "judgeSeconds": 0})  # fmt: skip
    assert "**1/1 harmful blocked, 1/1 benign passed.**" in table
    assert "Not run again on 2026-12-04 (rows as an earlier run left them): eps-1e-5 " in table
    assert "| vllm-vs-transformers | benign | - | strict | 64 | Passed |" in table


def test_the_calibration_suite_has_the_bench_shape_and_none_of_its_prompts(
    bench: ModuleType,
) -> None:
    calibration, check = bench.calibration_suite(), bench.bench_suite()
    assert len(calibration.select(long=False).prompts) == len(check.select(long=False).prompts)
    assert len(calibration.select(long=True).prompts) == len(check.select(long=True).prompts)
    assert not {p.text for p in calibration.prompts} & {p.text for p in check.prompts}
    short = [p.text for p in check.select(long=False).prompts]
    for prompt in calibration.select(long=False).prompts:
        assert not any(prompt.text in t or t in prompt.text for t in short), prompt.id
    assert {p.tags[0] for p in calibration.select(long=False).prompts} == {"en", "zh"}


def _kept(path: Path, dtype: str, engine: str = "transformers") -> Path:
    path.write_text(json.dumps({"dtype": dtype, "engine": engine}))
    return path


def test_a_row_is_judged_with_the_noise_kept_for_its_own_stable_or_stays_static(
    bench: ModuleType, tmp_path: Path
) -> None:
    by_name = {c.name: c for c in bench.CANDIDATES}
    kept = {
        "tf32": _kept(tmp_path / "fp32.json", "float32"),
        "tf-bf16": _kept(tmp_path / "bf16.json", "float32"),  # not the bf16 stable's record
    }
    noise, why = bench.calibration_for(by_name["transformers-bf16-vs-fp32"], kept)
    assert noise == tmp_path / "fp32.json"
    noise, why = bench.calibration_for(by_name["kernel-avx2"], kept)
    assert noise is None
    assert why == (
        "static: the kept record is of transformers float32, the baseline transformers bfloat16"
    )
    noise, why = bench.calibration_for(by_name["vllm-batched"], kept)
    assert noise is None
    assert why == "static: no noise kept for vllm-bf16 (vllm bfloat16)"
    noise, why = bench.calibration_for(by_name["fp16-overflow"], kept)
    assert why.endswith("(transformers bfloat16, model massive-activations)")


def test_the_calibration_sides_share_their_stables_token_count(bench: ModuleType) -> None:
    assert bench.TOKENS["cal-tf32"] == bench.TOKENS["tf32"] == 64
    assert bench.TOKENS["cal-tf16@cal-tf32"] == 64
    assert bench.TOKENS["cal-tf32@cal-tf-bf16"] == bench.TOKENS["tf-bf16"]
