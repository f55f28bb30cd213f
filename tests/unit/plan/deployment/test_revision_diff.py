"""What changed between two revisions, as `infergate diff`, the canary's Progressing message
and the check's report say it."""

from __future__ import annotations

from infergate.plan.deployment.revision_diff import revision_changes, summary
from tests.unit.plan.deployment.world import World

BEFORE = {
    "model": {"name": "qwen", "uri": "pvc://models/qwen"},
    "engine": {
        "kind": "vllm",
        "image": "vllm/vllm-openai:v0.32.0",
        "dtype": "bfloat16",
        "maxModelLen": 4096,
        "config": {"rms_norm_eps": 1e-6},
        "env": [{"name": "VLLM_ATTENTION_BACKEND", "value": "FLASH_ATTN"}],
    },
    "accelerator": {"kind": "nvidia-gpu", "count": 1},
}


def test_changes_are_listed_in_reading_order_with_both_values() -> None:
    after = {
        "model": {"name": "qwen", "uri": "pvc://models/qwen-v2"},
        "engine": {
            **BEFORE["engine"],
            "kind": "mindformers",
            "image": "ghcr.io/infergate/engine-mindformers:1.9.0-ms2.9.0",
            "dtype": "float16",
            "config": {"rms_norm_eps": 1e-4, "rope_theta": 1e6},
            "env": [],
        },
        "accelerator": {"kind": "ascend-npu", "count": 1},
    }
    described = [c.describe() for c in revision_changes(BEFORE, after)]
    assert described == [
        "engine.kind: vllm -> mindformers",
        "engine.image: vllm/vllm-openai:v0.32.0 -> ghcr.io/infergate/engine-mindformers:1.9.0-ms2.9.0",
        "engine.dtype: bfloat16 -> float16",
        "model.uri: pvc://models/qwen -> pvc://models/qwen-v2",
        "engine.config.rms_norm_eps: 1e-06 -> 0.0001",
        "engine.config.rope_theta: (unset) -> 1000000.0",
        "engine.env.VLLM_ATTENTION_BACKEND: FLASH_ATTN -> (unset)",
        "accelerator.kind: nvidia-gpu -> ascend-npu",
    ]
    assert summary(revision_changes(BEFORE, after), limit=2).endswith("and 6 more (infergate diff)")


def test_identical_revisions_have_no_changes() -> None:
    assert revision_changes(BEFORE, BEFORE) == []
    assert summary([]) == "no field of the revision differs"


def test_the_canary_says_what_it_changes_while_it_starts() -> None:
    world = World()
    world.settle()
    world.change(dtype="float16")
    world.reconcile()
    progressing = next(c for c in world.status.conditions if c.type == "Progressing")
    assert progressing.reason == "CanaryStarted"
    assert "it changes engine.dtype: bfloat16 -> float16" in progressing.message
