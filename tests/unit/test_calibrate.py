"""`infergate parity calibrate`: noise bounds, signed measures and proposals, known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from infergate.calibration.noise import (
    clustered_upper,
    pair_report,
    signed_prompt_measures,
    suite_digest,
    suite_metrics,
)
from infergate.calibration.proposals import propose
from infergate.cli import main
from infergate.recordio import RecordWriter
from tests.unit.parity.builders import meta, replace, suite, teacher_forced_on


def test_a_two_percent_hidden_scale_reads_log_1_02() -> None:
    base = suite(1)[0]
    assert base.hidden_states is not None
    scaled = replace(base, hidden_states=base.hidden_states * np.float32(1.02))
    measures = signed_prompt_measures(base, scaled)
    assert measures["hiddenNormRatio"] == pytest.approx(math.log(1.02), rel=1e-5)


def test_a_constant_logprob_shift_moves_the_log_perplexity_ratio_by_it() -> None:
    base = suite(1)[0]
    shifted = replace(base, teacher_forced=teacher_forced_on(base, shift=-0.05))
    assert signed_prompt_measures(base, shifted)["logPerplexityRatio"] == pytest.approx(-0.05)
    same = replace(base, teacher_forced=teacher_forced_on(base))
    assert signed_prompt_measures(base, same) == {"hiddenNormRatio": 0.0, "logPerplexityRatio": 0.0}


def test_records_scored_from_position_1_compare_both_sides_own_scores() -> None:
    from tests.unit.parity.builders import candidate_of, scored

    base = scored(suite(1)[0])
    shifted = candidate_of(base, shift=0.3)
    assert signed_prompt_measures(base, shifted)["logPerplexityRatio"] == pytest.approx(0.3)
    assert signed_prompt_measures(base, candidate_of(base))["logPerplexityRatio"] == 0.0


def test_means_get_a_clustered_upper_bound_rates_a_wilson_miss_bound() -> None:
    metrics = {
        "logprobs": {
            "meanKl": {"value": 1e-5, "stderr": 2e-6, "count": 100},
            "sameTopRate": {"value": 0.99, "successes": 99, "total": 100, "low": 0.95, "high": 1},
            "klP99": 4e-5,
        },
        "hidden": {"cosine": {"value": 0.9999, "stderr": 1e-5, "count": 10}, "cosineP1": 0.999},
    }
    found = {m.path: m for m in suite_metrics(metrics)}
    assert found["logprobs.meanKl"].upper == pytest.approx(1e-5 + 1.6449 * 2e-6, rel=1e-4)
    assert found["logprobs.sameTopRate"].upper == pytest.approx(0.05)
    assert found["logprobs.sameTopRate"].noise == "miss"
    assert found["hidden.cosine"].upper == pytest.approx(1e-4 + 1.6449 * 1e-5, rel=1e-3)
    assert found["hidden.cosineP1"].upper == pytest.approx(1e-3)
    assert not found["logprobs.klP99"].bounded


def test_clustered_upper_is_abs_mean_plus_z_stderr() -> None:
    out = clustered_upper([-0.02, -0.02, -0.02, -0.02])
    assert out["mean"] == pytest.approx(-0.02)
    assert out["upperAbs"] == pytest.approx(0.02)
    assert clustered_upper([0.1])["upperAbs"] is None, "one prompt has no standard error"


def _pair(label: str, kl_upper: float, miss: float) -> dict[str, object]:
    return {
        "label": label,
        "noise": {
            "logprobs.meanKl": {"value": kl_upper, "upper": kl_upper, "bounded": True},
            "logprobs.sameTopRate": {"value": 1 - miss, "upper": miss, "bounded": True},
        },
    }


def test_proposals_take_the_worst_pair_times_the_multiple() -> None:
    proposals = {
        p["key"]: p for p in propose([_pair("a", 1e-5, 0.002), _pair("b", 2e-5, 0.001)], 3.0)
    }
    assert proposals["maxMeanKl"]["value"] == pytest.approx(9 * 2e-5)
    assert proposals["minSameTopRate"]["value"] == pytest.approx(1 - 3 * 0.002)
    deeper = {p["key"]: p for p in propose([_pair("a", 1e-5, 0.002)], 3.0, depth_factor=2.0)}
    assert deeper["maxMeanKl"]["value"] == pytest.approx(36 * 1e-5)


def test_zero_noise_proposes_zero_and_says_it_is_strict() -> None:
    (kl, top) = propose([_pair("aa", 0.0, 0.0)], 3.0)
    assert kl["value"] == 0.0
    assert top["value"] == 1.0
    assert "strict" in kl["note"]


def test_identical_records_report_zero_noise(tmp_path: Path) -> None:
    prompts = suite(6)
    base, cand = tmp_path / "base", tmp_path / "cand"
    with RecordWriter(base, meta()) as writer:
        for p in prompts:
            writer.add(p)
    with RecordWriter(cand, meta()) as writer:
        for p in prompts:
            writer.add(replace(p, teacher_forced=teacher_forced_on(p)))
    out = tmp_path / "cal.json"
    assert main(["parity", "calibrate", "--pair", f"aa={base}:{cand}", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    (pair,) = document["pairs"]
    assert pair["noise"]["logprobs.meanKl"]["value"] == 0.0
    assert pair["noise"]["hidden.relL2"]["value"] == 0.0
    assert pair["signed"]["hiddenNormRatio"]["mean"] == 0.0
    assert suite_digest(prompts) in document["citation"]
    assert {p["key"]: p["value"] for p in document["proposals"]}["maxMeanKl"] == 0.0


def test_pair_report_lists_every_numeric_per_prompt_field() -> None:
    result = {
        "baseline": {},
        "candidate": {},
        "metrics": {"prompts": 2},
        "prompts": [{"meanKl": 1e-5, "promptTokens": 3}, {"meanKl": 3e-5, "promptTokens": 4}],
    }
    report = pair_report("x", result, [])
    assert report["perPrompt"]["meanKl"]["max"] == pytest.approx(3e-5)
    assert "promptTokens" not in report["perPrompt"]


def test_bad_pair_argument_names_the_expected_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "calibrate", "--pair", "only-one-dir"]) == 2
    assert "[LABEL=]BASELINE:CANDIDATE" in capsys.readouterr().err


class _Serving:
    """A channel that answers with what it was asked, counting calls and threads."""

    def __init__(self) -> None:
        import threading

        self.calls: list[tuple[str, object]] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()
        self._threading = threading

    def _note(self, kind: str, key: object) -> None:
        with self._lock:
            self.calls.append((kind, key))
            self.threads.add(self._threading.get_ident())

    def tokenize(self, text: str) -> list[int]:
        return [len(text)]

    def complete(
        self,
        prompt: list[int] | str,
        *,
        max_tokens: int,
        top_logprobs: int,
        seed: int,
        ignore_eos: bool = True,
    ) -> object:
        sent = prompt if isinstance(prompt, str) else tuple(prompt)
        self._note("complete", (sent, max_tokens, top_logprobs, seed, ignore_eos))
        return ("completion", sent, max_tokens, ignore_eos)

    def score(
        self, prompt: list[int], forced: list[int], *, top_logprobs: int, seed: int
    ) -> object:
        from infergate.parity.record import TeacherForced
        from tests.unit.parity.builders import top_k_for

        self._note("score", (tuple(prompt), tuple(forced), top_logprobs, seed))
        ids = np.asarray(forced, np.int64)
        return TeacherForced(ids, np.zeros(len(forced)), top_k_for(ids), len(prompt))

    def hidden_states(self, token_ids: list[int]) -> object:
        self._note("hidden", tuple(token_ids))
        return ("hidden", tuple(token_ids))


def test_threaded_prefetch_answers_the_recorder_from_one_concurrent_pass() -> None:
    from infergate.engines.client import score_from
    from infergate.engines.prefetch import ThreadedPrefetch
    from infergate.engines.record import RecordSettings, generate
    from infergate.suite import PromptSpec, Suite
    from tests.unit.parity.builders import record

    prompts = suite(4)
    baseline = record(prompts)
    specs = (
        tuple(
            PromptSpec(id=p.prompt_id, token_ids=tuple(int(t) for t in p.prompt_token_ids))
            for p in prompts[:2]
        )
        + tuple(  # text goes as text; one prompt asks for EOS to be honoured
            PromptSpec(id=p.prompt_id, text=f"prompt {i}", ignore_eos=i % 2 == 0)
            for i, p in enumerate(prompts[2:])
        )
    )
    inner = _Serving()
    channel = ThreadedPrefetch(inner, inner, concurrency=4)
    settings = RecordSettings(max_tokens=8, top_logprobs=5)
    channel.prefetch(Suite("s", specs), settings, baseline)
    assert len(inner.calls) == 12, "one completion, one score, one hidden pass per prompt"
    assert ("complete", ("prompt 0", 8, 5, 42, True)) in inner.calls
    assert ("complete", ("prompt 1", 8, 5, 42, False)) in inner.calls
    before = len(inner.calls)
    for spec, base in zip(specs, prompts, strict=True):
        sent = spec.text if spec.text is not None else tuple(spec.token_ids or ())
        answer = generate(channel, spec, max_tokens=8, top_logprobs=5, seed=42)  # type: ignore[arg-type]
        assert answer == ("completion", sent, 8, spec.ignore_eos)
        sequence = base.prompt_token_ids.tolist() + base.output_token_ids.tolist()
        scored = score_from(channel, sequence, 1, top_logprobs=5, seed=42)  # type: ignore[arg-type]
        assert scored.token_ids.tolist() == sequence[1:]
        channel.hidden_states(sequence)
    assert len(inner.calls) == before, "the recorder's calls were all answered from the pass"


def test_the_other_dtype_is_recorded_in_process_even_against_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server serves one dtype and plain vLLM cannot say which: recorded through it, the
    --also-dtype run would be an A/A pair kept under the other dtype's name, and a bf16
    kernel check would be judged on it as the bf16-vs-fp32 envelope."""
    import subprocess

    from infergate.calibration import measure

    commands: list[list[str]] = []

    def run(command: list[str], check: bool) -> subprocess.CompletedProcess[bytes]:
        commands.append(command)
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "manifest.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(measure.subprocess, "run", run)
    runs = measure.CalibrationRuns(
        engine="vllm", model=tmp_path / "model", dtype="bfloat16", suite="default",
        work=tmp_path / "cal", url="http://127.0.0.1:8000", probe_url="http://127.0.0.1:8001",
        concurrency=0, also_dtype="float32", max_tokens=16, long_max_tokens=8,
    )  # fmt: skip
    pairs = measure.record_runs(runs)
    served = {c[c.index("--dtype") + 1]: c for c in commands}
    assert len(commands) == 3
    assert [c.count("--url") for c in commands] == [1, 1, 0]
    assert "--url" not in served["float32"]
    assert "--probe-url" not in served["float32"]
    assert [label for label, _, _ in pairs] == ["bfloat16 A/A", "float32 vs bfloat16"]


def test_the_kept_families_take_the_cores_prompt_level_bounds() -> None:
    """Same-top misses bunched in one prompt: Wilson over positions says the miss rate is
    tightly bounded, the core's prompt-level bound (what the check's own bound will be)
    says it is not; the noise kept is the latter, and the P99/P1 points become bounds."""
    metrics = {
        "prompts": 8,
        "logprobs": {
            "meanKl": {"value": 1e-5, "stderr": 1e-7, "count": 4000},
            "sameTopRate": {"value": 0.99, "successes": 3960, "total": 4000,
                            "low": 0.987, "high": 0.992},
            "klP99": 4e-5,
        },
        "hidden": {"relL2P99": 0.01, "cosineP1": 0.9999},
        "estimates": {
            "meanKl": {"value": 1e-5, "lower": 2e-6, "upper": 3e-5},
            "sameTopRate": {"value": 0.99, "lower": 0.95, "upper": 1.0},
            "klP99": {"value": 4e-5, "lower": 3e-5, "upper": 6e-5},
            "hiddenRelL2P99": {"value": 0.01, "lower": 0.009, "upper": 0.014},
            "hiddenCosineP1": {"value": 0.9999, "lower": 0.9997, "upper": 0.99995},
        },
    }  # fmt: skip
    result = {"baseline": {}, "candidate": {}, "metrics": metrics, "prompts": []}
    noise = pair_report("aa", result, [])["noise"]
    assert noise["logprobs.meanKl"]["upper"] == pytest.approx(3e-5)
    assert noise["logprobs.sameTopRate"]["upper"] == pytest.approx(0.05)
    assert noise["logprobs.klP99"] == {"value": 4e-5, "upper": 6e-5, "noise": "error",
                                       "bounded": True}  # fmt: skip
    assert noise["hidden.relL2P99"]["upper"] == pytest.approx(0.014)
    assert noise["hidden.cosineP1"]["upper"] == pytest.approx(3e-4)
    # Without the core's estimate, the position-level bound stays.
    del metrics["estimates"]["sameTopRate"]
    again = pair_report("aa", result, [])["noise"]
    assert again["logprobs.sameTopRate"]["upper"] == pytest.approx(0.013)


def test_a_signed_decode_excess_keeps_its_larger_magnitude_as_noise() -> None:
    """An excess measured at -2.2e-6 (bounds -3.5e-6 .. 1.4e-6) is noise of 3.5e-6, never
    the 1.4e-6 upper end alone, which would sit below what was observed."""
    excess = {"value": -2.2e-6, "lower": -3.5e-6, "upper": 1.4e-6}
    metrics = {"prompts": 8, "decode": {"excess": excess}}
    result = {"baseline": {}, "candidate": {}, "metrics": metrics, "prompts": []}
    noise = pair_report("aa", result, [])["noise"]["decode.excess"]
    assert noise["upper"] == pytest.approx(3.5e-6)
    assert noise["bounded"]
