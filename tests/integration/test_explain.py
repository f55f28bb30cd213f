"""`kubectl explain` on the installed CRDs tells a person each field's meaning, unit and
default, at every depth."""

from __future__ import annotations

import pytest

from tests.harness import Cluster, apply_crds

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("inferencedeployment.spec.rollout.progressDeadlineSeconds", ["Seconds", "Default: 1800"]),
        ("inferencedeployment.spec.engine.maxModelLen", ["tokens"]),
        ("inferencedeployment.spec.engine.seed", ["no unit", "Default: 42"]),
        ("inferencedeployment.spec.rollout.parity.sampling.topLogprobs", ["tokens", "Default: 5"]),
        ("paritycheck.spec.thresholds.maxMeanKl", ["nats"]),
        ("paritycheck.spec.regression.confidence", ["0.5..1", "Default: 0.95"]),
        ("paritycheck.spec.runner.activeDeadlineSeconds", ["Seconds", "Default: 3600"]),
        ("inferencedeployment.spec.placement.tolerations.operator", ["Default: Equal"]),
    ],
)
def test_kubectl_explain_shows_unit_and_default(
    cluster: Cluster, path: str, expected: list[str]
) -> None:
    apply_crds(cluster)
    shown = " ".join(cluster.kubectl("explain", path).stdout.split())
    for text in expected:
        assert text in shown, f"{path}: {text!r} not in {shown!r}"
