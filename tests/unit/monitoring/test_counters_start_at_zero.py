"""A deployment's counters exist at 0 from the first reconcile, for every reason, so the
first verdict, promotion or rollback shows as an increase in Prometheus (a series that
appears at 1 has no increase())."""

from __future__ import annotations

from prometheus_client import REGISTRY

from infergate import metrics
from infergate.api.enums import DeploymentPhase


def _value(series: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(series, labels)


def test_the_first_reconcile_creates_every_counter_at_zero() -> None:
    metrics.record_phase("ns-zero", "fresh", DeploymentPhase.STABLE, 1)
    for outcome in ("Passed", "Failed", "Error", "Inconclusive"):
        assert (
            _value(
                "infergate_parity_verdicts_total",
                namespace="ns-zero",
                name="fresh",
                outcome=outcome,
            )
            == 0.0
        )
    for reason in ("ParityPassed", "ByHand", "RollbackByHand"):
        assert (
            _value("infergate_promotions_total", namespace="ns-zero", name="fresh", reason=reason)
            == 0.0
        )
    for reason in (
        "ParityFailed",
        "ParityError",
        "ProgressDeadlineExceeded",
        "Aborted",
        "RollbackByHand",
    ):
        assert (
            _value("infergate_rollbacks_total", namespace="ns-zero", name="fresh", reason=reason)
            == 0.0
        )
    assert (
        _value(
            "infergate_parity_verdicts_total", namespace="ns-zero", name="other", outcome="Failed"
        )
        is None
    )


def test_an_outcome_then_counts_from_zero_to_one() -> None:
    metrics.record_outcomes(
        "ns-zero", "counted", [("verdict", "Failed"), ("rollback", "ParityFailed")]
    )
    assert (
        _value(
            "infergate_parity_verdicts_total", namespace="ns-zero", name="counted", outcome="Failed"
        )
        == 1.0
    )
    assert (
        _value(
            "infergate_parity_verdicts_total", namespace="ns-zero", name="counted", outcome="Passed"
        )
        == 0.0
    )
    assert (
        _value(
            "infergate_rollbacks_total", namespace="ns-zero", name="counted", reason="ParityFailed"
        )
        == 1.0
    )
