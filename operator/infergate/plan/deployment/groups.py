"""Multi-node revisions (spec.topology.nodes above 1): what the operator does with them yet.

A group revision renders to a LeaderWorkerSet (render/group.py), but the rollout does not
yet observe LeaderWorkerSets: it could not tell a whole group from a half-started one, so
it could neither judge a canary group nor keep a broken one from serving. Until it can,
such a spec is refused before anything is written (the deployment's conditions say why),
never half-rolled out as a Deployment of single pods.
"""

from __future__ import annotations

from infergate.api.inference_deployment import InferenceDeploymentSpec
from infergate.errors import SpecError

GROUPS_NOT_ROLLED_OUT = (
    "spec.topology.nodes: {nodes} is not rolled out by this operator yet: a revision of "
    "more than one node renders to a LeaderWorkerSet, whose groups the rollout does not "
    "observe or gate yet; use topology.nodes 1 (see docs/multi-node.md)"
)


def refuse_unobserved_groups(spec: InferenceDeploymentSpec) -> None:
    """SpecError for a multi-node topology (see the module doc)."""
    if spec.layout.multi_node:
        raise SpecError(GROUPS_NOT_ROLLED_OUT.format(nodes=spec.layout.nodes))
