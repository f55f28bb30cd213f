"""A failed check names its first diverging layer, on real vLLM engine pods, through the
transformers stand-in in each side's probe pod.

One vLLM deployment of the fixture model (bfloat16, two decoder layers) is stable; two
harmful canaries follow, each checked, failed and rolled back:

1. `model.uri` moves to a copy of the fixture whose decoder layer CORRUPTED has 50%
   noise on every matrix (a damaged shard): the check's verdict reasons and its HTML
   report (the report ConfigMap) name that layer;
2. `rms_norm_eps` 1e-6 -> 1e-4 (the demo's harmful change): the first norm the model
   applies is layer 0's input norm, so layer 0 is named.

vLLM returns only its last layer: each side's probe pod runs `infergate layer-stand-in`
beside its fingerprint server (render/layer_stand_in.py), loaded with the revision's
weights, dtype and pinned overrides; both the reason and the report say the layers came
from the stand-in. The sides' pinned fingerprints already differ (weights digest,
rms_norm_eps), so each check measures a few prompts only (runner/steps/gate.py
`settled_suite`); the time goes into starting the engines.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infergate.fixture.variants import corrupt_layer
from tests.e2e.canary import Rollout
from tests.e2e.support import Operator, Stopwatch, fixture_model, report
from tests.e2e.traffic import vllm_deployment
from tests.harness import Cluster, namespace_for, release_namespace

# Measured on 2 shared cores: the stable revision ~35 s, each canary with its check and
# rollback ~80 s (3.6 min for the module). `make test` runs the corrupted layer (~2 min);
# the epsilon change, a second canary, is left to `make test-slow`.
pytestmark = pytest.mark.timeout(1800)

NAME = "qwen"
LAYERS = 2
CORRUPTED = 1
STAND_IN = "answered for it as a stand-in"


@dataclass
class Story:
    cluster: Cluster
    namespace: str
    rollout: Rollout
    clock: Stopwatch
    stable: str


@pytest.fixture(scope="module")
def story(operator: Operator, cluster: Cluster) -> Iterator[Story]:
    namespace = namespace_for("layers", f"e2e-{operator.session}", 12)
    cluster.kubectl("create", "namespace", namespace)
    rollout, clock = Rollout(cluster, namespace, NAME), Stopwatch()
    try:
        rollout.apply(vllm_deployment(NAME))
        stable = rollout.wait_stable(timeout=1200)
        clock.mark(f"stable revision {stable}")
        yield Story(cluster, namespace, rollout, clock, stable)
    finally:
        release_namespace(cluster, namespace)


def _fails_and_rolls_back(story: Story, manifest: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Apply `manifest`; its canary's ended check, once the canary is rolled back."""
    story.rollout.apply(manifest)
    canary = story.rollout.wait_canary(timeout=300)
    story.clock.mark(f"canary {canary}")
    check = story.rollout.wait_check(canary, timeout=1500)
    reasons = [r.get("message") for r in (check.get("verdict") or {}).get("reasons") or []]
    story.clock.mark(f"check {check['phase']}: {reasons}")
    rolled = story.rollout.wait(
        lambda s: s.get("phase") == "RolledBack" and not s.get("canaryRevision"), 600, "rollback"
    )
    story.clock.mark("rolled back")
    assert rolled["stableRevision"] == story.stable
    assert story.rollout.revision_record(canary)["rejected"] is True
    return check, canary


def _first_diverging(check: dict[str, Any]) -> str:
    """The verdict's one first-diverging-layer reason."""
    found = [r for r in check["verdict"]["reasons"] if r["metric"] == "layers.firstDiverging"]
    assert len(found) == 1, check["verdict"]["reasons"]
    message: str = found[0]["message"]
    return message


def _assert_stand_in_named(message: str) -> None:
    """Both vLLM sides' layers came from the stand-in, and the line says so."""
    assert "baseline (vllm)" in message, message
    assert "candidate (vllm)" in message, message
    assert STAND_IN in message, message


def _assert_report_names(story: Story, check: dict[str, Any], layer: str) -> None:
    html, document = report(story.cluster, story.namespace, check)
    assert "First diverging layer" in html
    assert f"first diverging layer: {layer} of {LAYERS}" in html
    assert STAND_IN in html
    assert any(
        f"first diverging layer: {layer} of {LAYERS}" in r for r in document["verdict"]["reasons"]
    ), document["verdict"]["reasons"]


def test_a_corrupted_layer_of_a_vllm_canary_is_named(story: Story, model_variants: Path) -> None:
    model = model_variants / f"corrupt-layer-{CORRUPTED}"
    if model.exists():
        shutil.rmtree(model)
    corrupt_layer(layer=CORRUPTED, relative_noise=0.5, seed=7)(fixture_model(), model)
    manifest = vllm_deployment(NAME)
    manifest["spec"]["model"]["uri"] = f"file://{model}"
    check, _ = _fails_and_rolls_back(story, manifest)
    assert check["phase"] == "Failed", check
    message = _first_diverging(check)
    assert f"first diverging layer: layer {CORRUPTED} of {LAYERS}" in message, message
    _assert_stand_in_named(message)
    _assert_report_names(story, check, f"layer {CORRUPTED}")


@pytest.mark.slow
def test_an_epsilon_change_of_a_vllm_canary_names_the_first_norm_it_affects(
    story: Story,
) -> None:
    check, _ = _fails_and_rolls_back(story, vllm_deployment(NAME, config={"rms_norm_eps": 1e-4}))
    assert check["phase"] == "Failed", check
    messages = " | ".join(r.get("message") or "" for r in check["verdict"]["reasons"])
    assert "rms_norm_eps" in messages
    # State 1 of the probe is decoder layer 0's output: its input norm is the first norm
    # the model applies (parity/layers.py names the states).
    message = _first_diverging(check)
    assert f"first diverging layer: layer 0 of {LAYERS}" in message, message
    _assert_stand_in_named(message)
    _assert_report_names(story, check, "layer 0")
