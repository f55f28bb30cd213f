"""Performance limits judged on paired repeats: bounds, never one run."""

from __future__ import annotations

import pytest

from infergate.api.enums import CheckPhase
from infergate.runner.load_drive import LoadAnswer, RunResult
from infergate.runner.performance import (
    Figures,
    Limits,
    figures,
    judge_change,
    judge_performance,
    relative_change,
    student_t_quantile,
)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    # Student t quantiles from the standard tables.
    [(0.9, 2, 1.885618), (0.95, 2, 2.919986), (0.975, 10, 2.228139), (0.95, 30, 1.697261)],
)
def test_t_quantiles_match_the_tables(p: float, df: int, expected: float) -> None:
    assert student_t_quantile(p, df) == pytest.approx(expected, abs=1e-5)


def test_one_run_never_decides() -> None:
    with pytest.raises(ValueError, match="two repeats"):
        relative_change([0.5], 0.9, 0.1)


@pytest.mark.parametrize(
    ("changes", "limit", "phase"),
    [
        ([0.01, -0.02, 0.0], 0.1, CheckPhase.PASSED),  # equal: the bound is well within
        ([0.45, 0.5, 0.55], 0.1, CheckPhase.FAILED),  # measurably slower
        ([0.0, 0.3, -0.1], 0.1, CheckPhase.INCONCLUSIVE),  # runs disagree: cannot say
        ([0.45, 0.5, 0.55], None, CheckPhase.PASSED),  # no limit set
    ],
)
def test_a_limit_is_met_broken_or_undecided_on_its_bounds(
    changes: list[float], limit: float | None, phase: CheckPhase
) -> None:
    assert judge_change(relative_change(changes, 0.9, limit)) is phase


def _run(tokens: int, seconds: float, ttft: float, gap: float) -> RunResult:
    answers = []
    for i in range(4):
        answer = LoadAnswer(f"r{i}", started=0.0, first_token=ttft)
        answer.token_times = [ttft + gap * k for k in range(tokens)]
        answer.output_tokens = tokens
        answers.append(answer)
    return RunResult(answers, seconds)


def test_figures_of_a_run() -> None:
    got = figures(_run(tokens=10, seconds=2.0, ttft=0.1, gap=0.02))
    assert got.tokens_per_second == pytest.approx(20.0)
    assert got.ttft_p50 == pytest.approx(0.1)
    assert got.itl_p99 == pytest.approx(0.02)


def test_a_slower_candidate_fails_the_throughput_limit_and_an_equal_one_passes() -> None:
    limits = Limits(0.1, 0.2, None, 0.9)
    base = Figures(100.0, 0.1, 0.2, 0.01, 0.02)
    slow = [(base, Figures(50.0 + i, 0.1, 0.5, 0.01, 0.02)) for i in range(3)]
    equal = [(base, Figures(100.0 + d, 0.1, 0.2 + d / 1000, 0.01, 0.02)) for d in (-2, 1, 2)]
    failed = judge_performance(slow, limits, 32)
    assert failed.phase is CheckPhase.FAILED
    assert failed.throughput_drop is not None
    assert failed.throughput_drop.low > 0.1
    assert judge_performance(equal, limits, 32).phase is CheckPhase.PASSED


def test_a_limited_figure_that_was_not_measured_is_inconclusive() -> None:
    limits = Limits(None, 0.2, None, 0.9)
    pairs = [(Figures(100.0, None, None, None, None), Figures(100.0, None, None, None, None))] * 3
    assert judge_performance(pairs, limits, 8).phase is CheckPhase.INCONCLUSIVE
