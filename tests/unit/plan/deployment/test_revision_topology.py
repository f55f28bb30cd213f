"""A revision's topology travels in its revision-spec annotation, so an old revision
renders again with its own layout after spec.topology moved on."""

from __future__ import annotations

import json
from typing import Any

from infergate.api import InferenceDeploymentSpec
from infergate.plan.deployment.desired import (
    Owner,
    desired_revision,
    revision_spec_annotation,
    spec_for_revision,
)
from infergate.plan.deployment.observed import ANNOTATION_REVISION_SPEC


def _spec(**topology: Any) -> InferenceDeploymentSpec:
    document: dict[str, Any] = {
        "model": {"name": "m", "uri": "pvc://models/m"},
        "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096,
                   "tensorParallelSize": 8},
        "accelerator": {"kind": "nvidia-gpu"},
        "rollout": {"autoPromote": False},
    }  # fmt: skip
    if topology:
        document["topology"] = topology
    return InferenceDeploymentSpec.model_validate(document)


def test_a_one_node_annotation_names_no_topology() -> None:
    assert "topology" not in json.loads(revision_spec_annotation(_spec()))
    assert "topology" not in json.loads(revision_spec_annotation(_spec(nodes=1)))


def test_a_group_revision_renders_again_with_its_own_layout() -> None:
    group = _spec(nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2)
    stamped = desired_revision(Owner("m", "llm", "uid"), group, replicas=1, role="canary")
    annotation = stamped.deployment["metadata"]["annotations"][ANNOTATION_REVISION_SPEC]
    assert json.loads(annotation)["topology"]["nodes"] == 2
    # The spec moved back to one node; the old revision keeps its group layout and hash.
    again = spec_for_revision(_spec(pipelineParallelSize=1), annotation)
    assert again.layout == group.layout
    again_stamped = desired_revision(Owner("m", "llm", "uid"), again, replicas=1, role="canary")
    assert again_stamped.revision == stamped.revision
    assert again_stamped.deployment["kind"] == "LeaderWorkerSet"


def test_an_annotation_from_before_topology_reads_as_one_node() -> None:
    current = _spec(nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2)
    before = revision_spec_annotation(_spec())
    assert "topology" not in json.loads(before)
    assert spec_for_revision(current, before).topology is None
