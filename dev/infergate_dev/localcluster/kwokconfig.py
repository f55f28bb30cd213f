"""KWOK's configuration: options plus the node and pod stages it plays.

Standalone kwok has no built-in stages; they ship inside the kwok module and
are copied next to the binary at build time. We play nodes `fast` +
`heartbeat-with-lease` and pods `fast` (ready, complete for Job pods, delete), plus
one stage of our own (`pod-ready-again`) that does what a kubelet's status manager does
and KWOK's `fast` set does not: when the node lifecycle controller marks the pods of a
node NotReady (a node that missed heartbeats, as during an API server outage), the node
reports them Ready again once it is back. Without it a Running pod stays NotReady for
ever, its Deployment never counts it available, and no rollout on it can complete.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infergate_dev.localcluster.layout import KWOK_POD_CIDR

STAGE_SETS = ("node/fast", "node/heartbeat-with-lease", "pod/fast")


def kwok_configuration() -> dict[str, object]:
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "metadata": {"name": "infergate-local"},
        "options": {
            "cidr": KWOK_POD_CIDR,
            "nodeIP": "127.0.0.1",
            "manageAllNodes": False,
            "manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
            "nodeLeaseDurationSeconds": 40,
            # A partial configuration gets no defaults for these; zero is refused.
            "nodeLeaseParallelism": 4,
            "nodePlayStageParallelism": 4,
            "podPlayStageParallelism": 4,
            "podsOnNodeSyncParallelism": 4,
            "serverAddress": "127.0.0.1:0",
        },
    }


# A Running pod (not a Job's: `pod-complete` ends those) whose Ready condition is not
# True: the containers a fast node "runs" are always ready, so report them so again,
# the conditions as `pod-ready` writes them.
_READY_AGAIN_TEMPLATE = """{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
"""


def pod_ready_again_stage() -> dict[str, object]:
    """The stage that re-reports a Running pod Ready after the node controller unset it."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-ready-again"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "NotIn",
                        "values": ["True"],
                    },
                    {
                        "key": ".metadata.ownerReferences.[].kind",
                        "operator": "NotIn",
                        "values": ["Job"],
                    },
                ]
            },
            "next": {"statusTemplate": _READY_AGAIN_TEMPLATE},
        },
    }


def write_kwok_config(path: Path, stage_root: Path) -> None:
    """Write the multi-document config: the KwokConfiguration, then the stages."""
    documents: list[object] = [kwok_configuration()]
    for stage_set in STAGE_SETS:
        folder = stage_root / stage_set
        stage_files = sorted(folder.glob("*.yaml"))
        stages = [f for f in stage_files if f.name != "kustomization.yaml"]
        if not stages:
            raise FileNotFoundError(f"no KWOK stages in {folder}; rebuild kwok")
        for stage_file in stages:
            documents.extend(d for d in yaml.safe_load_all(stage_file.read_text()) if d)
    documents.append(pod_ready_again_stage())
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
