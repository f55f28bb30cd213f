"""The local cluster's nodes report a Running pod Ready again after the node lifecycle
controller marked it NotReady (a node that missed its heartbeats during an API server
outage), as a kubelet does: otherwise no Deployment on them is ever available again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infergate_dev.localcluster.executor.pod import PodRunner, Site
from infergate_dev.localcluster.kwokconfig import (
    _GATES_OPEN_QUERY,
    _UPSTREAM_GATES,
    _UPSTREAM_READY,
    _honour_gates,
    pod_gate_closed_stage,
    pod_ready_again_stage,
)

POD: dict[str, Any] = {
    "metadata": {"name": "engine-0", "namespace": "llm", "uid": "u-1"},
    "spec": {"containers": [{"name": "engine", "image": "img"}]},
}


class _Api:
    """Records the status writes (the only call a Running pod's reports make)."""

    def __init__(self) -> None:
        self.reported: list[dict[str, Any]] = []

    def patch_pod_status(self, _pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.reported.append(status)


def _ready(status: dict[str, Any]) -> str:
    return str(next(c["status"] for c in status["conditions"] if c["type"] == "Ready"))


def test_the_executor_reports_a_pod_ready_again_once_the_api_says_otherwise(
    tmp_path: Path,
) -> None:
    api = _Api()
    site = Site(tmp_path, tmp_path, tmp_path, "127.0.0.1", 6443, [], tmp_path / "hosts")
    runner = PodRunner(POD, "127.0.0.9", api, site)  # type: ignore[arg-type]
    runner._phase = "Running"  # as after its containers started; none run here
    runner._report()
    runner._report()
    assert len(api.reported) == 1  # nothing new: not written again
    # What the API server holds agrees: nothing to do.
    listed = {**POD, "status": api.reported[0]}
    runner.observe(listed)
    runner._report()
    assert len(api.reported) == 1
    # Someone else changed its Ready condition (the node lifecycle controller marks pods
    # NotReady; no container runs here, so the runner's own view is not ready and the
    # other party says it is): the next tick reports the runner's view again.
    flipped = {"True": "False", "False": "True"}
    marked = [
        {**c, "status": flipped[c["status"]]} if c["type"] == "Ready" else c
        for c in api.reported[0]["conditions"]
    ]
    runner.observe({**POD, "status": {**api.reported[0], "conditions": marked}})
    runner._report()
    assert len(api.reported) == 2
    assert _ready(api.reported[1]) == _ready(api.reported[0])


def test_kwok_nodes_report_running_pods_ready_again_except_jobs_pods() -> None:
    stage = pod_ready_again_stage()
    spec: dict[str, Any] = stage["spec"]  # type: ignore[assignment]
    expressions = spec["selector"]["matchExpressions"]
    selector = {e["key"]: (e["operator"], e.get("values")) for e in expressions}
    assert selector[".status.phase"] == ("In", ["Running"])
    assert selector['.status.conditions.[] | select( .type == "Ready" ) | .status'] == (
        "NotIn",
        ["True"],
    )
    # A Job's Running pod is completed by `pod-complete`, never made ready.
    assert selector[".metadata.ownerReferences.[].kind"] == ("NotIn", ["Job"])
    assert selector[".metadata.deletionTimestamp"] == ("DoesNotExist", None)
    assert "type: Ready" in spec["next"]["statusTemplate"]


# -- readiness gates: Ready waits for every gate, as a kubelet's status manager derives it --

GATED: dict[str, Any] = {
    **POD,
    "spec": {**POD["spec"], "readinessGates": [{"conditionType": "infergate.io/checked"}]},
}


class _ReadyContainer:
    """A container whose process is up and ready."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] = {"name": "engine", "image": "img"}
        self.terminated = None

    def status(self, image: str) -> dict[str, Any]:
        return {"name": "engine", "image": image, "ready": True, "restartCount": 0}


def test_the_executor_holds_ready_until_every_readiness_gate_is_true(tmp_path: Path) -> None:
    api = _Api()
    site = Site(tmp_path, tmp_path, tmp_path, "127.0.0.1", 6443, [], tmp_path / "hosts")
    runner = PodRunner(GATED, "127.0.0.9", api, site)  # type: ignore[arg-type]
    runner._phase = "Running"
    runner._containers = [_ReadyContainer()]  # type: ignore[list-item]
    runner._report()
    conditions = {c["type"]: c for c in api.reported[-1]["conditions"]}
    assert conditions["ContainersReady"]["status"] == "True"
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
        "False",
        "ReadinessGatesNotReady",
    )
    # The gate's condition is never written by the node: whoever owns it does.
    assert {c["type"] for c in api.reported[-1]["conditions"]} >= {"Ready", "ContainersReady"}
    assert "infergate.io/checked" not in {c["type"] for c in api.reported[-1]["conditions"]}
    opened = {
        **GATED,
        "status": {
            **api.reported[-1],
            "conditions": [
                *api.reported[-1]["conditions"],
                {"type": "infergate.io/checked", "status": "True"},
            ],
        },
    }
    runner.observe(opened)
    runner._report()
    assert _ready(api.reported[-1]) == "True"
    closed = {
        **opened,
        "status": {**opened["status"], "conditions": api.reported[-1]["conditions"]},
    }
    runner.observe(closed)
    runner._report()
    assert _ready(api.reported[-1]) == "False"


def test_kwok_nodes_never_report_a_gate_and_hold_ready_for_it() -> None:
    upstream = (
        "{{ $now := Now }}\nconditions:\n" + _UPSTREAM_READY + _UPSTREAM_GATES + "phase: Running\n"
    )
    stage = _honour_gates({"spec": {"next": {"statusTemplate": upstream}}})
    template = stage["spec"]["next"]["statusTemplate"]
    assert ".conditionType | Quote" not in template  # no gate reported True by the node
    assert "ReadinessGatesNotReady" in template
    with pytest.raises(ValueError, match="pod-ready template changed"):
        _honour_gates({"spec": {"next": {"statusTemplate": "conditions: []\n"}}})
    # Ready again only with the gates met; unset when a gate is set False on a Ready pod.
    again = pod_ready_again_stage()["spec"]["selector"]["matchExpressions"]  # type: ignore[index]
    assert {"key": _GATES_OPEN_QUERY, "operator": "In", "values": ["true"]} in again
    closed = pod_gate_closed_stage()["spec"]  # type: ignore[index]
    assert {"key": _GATES_OPEN_QUERY, "operator": "In", "values": ["false"]} in closed["selector"][
        "matchExpressions"
    ]
    assert "ReadinessGatesNotReady" in closed["next"]["statusTemplate"]
