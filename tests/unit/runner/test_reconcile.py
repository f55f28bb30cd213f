"""One reconcile of a check against an in-memory namespace: what it creates, starts and frees."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from infergate.kube.paritycheck_reconcile import reconcile
from infergate.render.labels import engine_pod_selector

from .fakes import FakeApi

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
BASE, CAND = "aaaaaaaaaa", "bbbbbbbbbb"


class FakeNamespace(FakeApi):
    """FakeApi plus the controller's reads and writes of children."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str]] = []

    def deployment(self, name: str) -> dict[str, Any] | None:
        return self.objects.get(("Deployment", name))

    def job(self, name: str) -> dict[str, Any] | None:
        return self.objects.get(("Job", name))

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.objects.get(("Pod", name))

    def pods(self, selector: str) -> list[dict[str, Any]]:  # noqa: ARG002 - no runner pods here
        return []

    def list_checks(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(c) for c in self.checks.values()]

    def children_exist(self, selector: str) -> bool:  # noqa: ARG002 - one check per namespace
        return any(
            kind in ("Pod", "ServiceAccount", "Role", "RoleBinding") for kind, _ in self.objects
        )

    def create(self, manifest: dict[str, Any]) -> bool:
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in self.objects:
            return False
        self.objects[key] = copy.deepcopy(manifest)
        return True

    def delete(self, kind: str, name: str) -> bool:
        self.deleted.append((kind, name))
        return self.objects.pop((kind, name), None) is not None


def namespace(**spec_overrides: Any) -> FakeNamespace:
    api = FakeNamespace()
    api.deployments["qwen"] = {"metadata": {"name": "qwen"}, "status": {"stableRevision": BASE}}
    api.add_revision("qwen", BASE, engine="vllm", dtype="bfloat16", ip="127.64.0.10")
    api.add_revision("qwen", CAND, engine="mindformers", dtype="float16", ip="127.64.0.11")
    template = {
        "metadata": {"labels": engine_pod_selector("qwen", BASE)},
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": "vllm/vllm-openai:v0.32.0",
                    "command": ["vllm"],
                    "args": ["serve", "/m"],
                }
            ]
        },
    }
    api.objects[("Deployment", f"qwen-{BASE}")] = {
        "metadata": {"name": f"qwen-{BASE}"},
        "spec": {"template": template},
    }
    spec = {
        "baseline": {"inferenceDeploymentRef": {"name": "qwen"}},
        "candidate": {"inferenceDeploymentRef": {"name": "qwen"}, "revision": CAND},
        "suite": {"inline": [{"id": "p", "text": "hello"}]},
        "deadlineSeconds": 600,
        "runner": {"activeDeadlineSeconds": 300},
        **spec_overrides,
    }
    api.add_check(f"qwen-{CAND}", spec)
    api.checks[f"qwen-{CAND}"]["metadata"]["creationTimestamp"] = "2026-12-02T12:00:00Z"
    return api


def run(api: FakeNamespace, minutes: float = 1) -> list[tuple[str, str, str]]:
    events: list[tuple[str, str, str]] = []
    reconcile(api, f"qwen-{CAND}", T0 + timedelta(minutes=minutes), lambda *e: events.append(e))
    return events


def status(api: FakeNamespace) -> dict[str, Any]:
    return api.checks[f"qwen-{CAND}"].get("status") or {}


def test_first_reconcile_pins_revisions_and_starts_the_vllm_probe_only() -> None:
    api = namespace()
    events = run(api)
    assert status(api)["baselineRevision"] == BASE  # the stable one, pinned for the check's life
    assert status(api)["candidateRevision"] == CAND
    kinds = sorted(api.objects)
    assert ("Pod", f"qwen-{CAND}-probe-baseline") in kinds
    assert ("Service", f"qwen-{CAND}-probe-baseline") in kinds
    assert ("Pod", f"qwen-{CAND}-probe-candidate") not in kinds  # MindFormers probes itself
    assert ("Job", f"qwen-{CAND}-runner") not in kinds
    assert events == [("Normal", "ProbeStarted", "hidden-state probes started for baseline")]


def test_a_later_stable_revision_does_not_move_a_pinned_check() -> None:
    api = namespace()
    run(api)
    api.deployments["qwen"]["status"]["stableRevision"] = "cccccccccc"
    run(api, minutes=2)
    assert status(api)["baselineRevision"] == BASE


def test_the_runner_starts_with_its_rbac_and_report_once_the_probe_is_ready() -> None:
    api = namespace()
    run(api)
    probe = api.objects[("Pod", f"qwen-{CAND}-probe-baseline")]
    probe["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    api.add_check("qwen-0000000000", {**api.checks[f"qwen-{CAND}"]["spec"]})
    api.checks["qwen-0000000000"]["status"] = {
        "phase": "Passed",
        "completionTime": "2026-12-01T00:00:00Z",
        "reportRef": {"name": "old-report", "key": "report.html"},
    }
    run(api, minutes=2)
    runner = f"qwen-{CAND}-runner"
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Job"):
        assert (kind, runner) in api.objects, kind
    assert ("ConfigMap", f"qwen-{CAND}-report") in api.objects
    args = api.objects[("Job", runner)]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--previous-report", "old-report"]
    role = api.objects[("Role", runner)]
    services = next(r for r in role["rules"] if r["resources"] == ["services"])
    assert services["resourceNames"] == sorted(
        [f"qwen-{BASE}", f"qwen-{CAND}", f"qwen-{CAND}-probe-baseline"]
    )


def test_an_ended_check_frees_probes_and_rbac_but_keeps_the_finished_job() -> None:
    api = namespace()
    run(api)
    api.objects[("Job", f"qwen-{CAND}-runner")] = {
        "metadata": {"name": f"qwen-{CAND}-runner"},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    api.checks[f"qwen-{CAND}"]["status"] = {
        "phase": "Passed",
        "verdict": {"passed": True, "summary": "ok"},
    }
    events = run(api, minutes=3)
    assert ("Pod", f"qwen-{CAND}-probe-baseline") in api.deleted
    assert ("Role", f"qwen-{CAND}-runner") in api.deleted
    assert ("Job", f"qwen-{CAND}-runner") not in api.deleted
    assert events == [("Normal", "CheckPassed", "ok")]
    assert any(c["type"] == "ResourcesReleased" for c in status(api)["conditions"])


def test_the_deadline_stops_a_running_runner_and_ends_in_error() -> None:
    api = namespace()
    run(api)
    api.objects[("Job", f"qwen-{CAND}-runner")] = {
        "metadata": {"name": f"qwen-{CAND}-runner"},
        "status": {},
    }
    events = run(api, minutes=11)
    assert status(api)["phase"] == "Error"
    assert ("Job", f"qwen-{CAND}-runner") in api.deleted
    assert events[0][:2] == ("Warning", "DeadlineExceeded")
