"""KWOK's configuration: options plus the node and pod stages it plays.

Standalone kwok has no built-in stages; they ship inside the kwok module and
are copied next to the binary at build time. We play nodes `fast` +
`heartbeat-with-lease` and pods `fast` (ready, complete for Job pods, delete), plus
one stage of our own (`pod-ready-again`) that does what a kubelet's status manager does
and KWOK's `fast` set does not: when the node lifecycle controller marks the pods of a
node NotReady (a node that missed heartbeats, as during an API server outage), the node
reports them Ready again once it is back. Without it a Running pod stays NotReady for
ever, its Deployment never counts it available, and no rollout on it can complete.

Readiness gates (`spec.readinessGates`) are honoured as a kubelet honours them: KWOK's own
`pod-ready` reports every gate True itself, which would make a gate that the operator holds
False (a restarted group awaiting its re-check, docs/multi-node.md) mean nothing here. So
our stages never write a gate's condition (whoever owns it does, through pods/status), and
report Ready True only once every gate's condition is True, else Ready False with the
kubelet's reason `ReadinessGatesNotReady` (`pod-ready`, as rewritten by `_honour_gates`;
`pod-ready-again`, which then waits for the gates; `pod-gate-closed`, which unsets Ready
when a gate is set False on a Ready pod).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


GATES_NOT_READY = "ReadinessGatesNotReady"
# Every readiness gate's condition is True (none declared counts as all True).
_GATES_OPEN_QUERY = (
    "([.spec.readinessGates[]?.conditionType] - [.status.conditions[]? "
    '| select(.status == "True") | .type]) | length == 0'
)
# Sets $open as _GATES_OPEN_QUERY does, in a status template.
_GATES_OPEN = """{{ $open := true }}
{{ range $gate := .spec.readinessGates }}
{{ $met := false }}
{{ range $.status.conditions }}
{{ if and (eq .type $gate.conditionType) (eq .status "True") }}{{ $met = true }}{{ end }}
{{ end }}
{{ if not $met }}{{ $open = false }}{{ end }}
{{ end }}
"""
# The Ready condition of a pod whose containers are ready, under its readiness gates.
_READY = """- lastTransitionTime: {{ $now | Quote }}
{{ if $open }}
  status: "True"
  reason: ""
{{ else }}
  status: "False"
  reason: GATES_NOT_READY
{{ end }}
  type: Ready
""".replace("GATES_NOT_READY", GATES_NOT_READY)
# KWOK's pod-ready template (v0.8.0), as it reports Ready and every gate True.
_UPSTREAM_READY = """- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
"""
_UPSTREAM_GATES = """{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
"""

# A Running pod (not a Job's: `pod-complete` ends those) whose Ready condition is not
# True while its gates are met: the containers a fast node "runs" are always ready, so
# report them so again, the conditions as `pod-ready` writes them.
_READY_AGAIN_TEMPLATE = (
    """{{ $now := Now }}
"""
    + _GATES_OPEN
    + """conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
"""
    + _READY
    + """- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
"""
)
_GATE_CLOSED_TEMPLATE = """{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: GATES_NOT_READY
  type: Ready
""".replace("GATES_NOT_READY", GATES_NOT_READY)


def _honour_gates(stage: dict[str, Any]) -> dict[str, Any]:
    """KWOK's `pod-ready` stage, reporting Ready as the gates allow and no gate itself."""
    template = stage["spec"]["next"]["statusTemplate"]
    for part in (_UPSTREAM_READY, _UPSTREAM_GATES):
        if part not in template:
            raise ValueError(f"KWOK's pod-ready template changed: no {part!r}; see kwokconfig.py")
    template = template.replace(_UPSTREAM_GATES, "").replace(_UPSTREAM_READY, _READY)
    template = template.replace("{{ $now := Now }}", "{{ $now := Now }}\n" + _GATES_OPEN, 1)
    stage["spec"]["next"]["statusTemplate"] = template
    return stage


def pod_gate_closed_stage() -> dict[str, object]:
    """The stage that unsets Ready on a Ready pod one of whose gates is set False."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "pod-gate-closed"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {
                        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                        "operator": "In",
                        "values": ["True"],
                    },
                    {"key": _GATES_OPEN_QUERY, "operator": "In", "values": ["false"]},
                ]
            },
            "next": {"statusTemplate": _GATE_CLOSED_TEMPLATE},
        },
    }


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
                    # Gates not met: Ready stays False until whoever owns them sets them.
                    {"key": _GATES_OPEN_QUERY, "operator": "In", "values": ["true"]},
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
            for loaded in yaml.safe_load_all(stage_file.read_text()):
                if loaded and loaded.get("metadata", {}).get("name") == "pod-ready":
                    documents.append(_honour_gates(loaded))
                elif loaded:
                    documents.append(loaded)
    documents.append(pod_ready_again_stage())
    documents.append(pod_gate_closed_stage())
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
