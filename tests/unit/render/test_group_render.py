"""What a user checks in a multi-node revision: one LeaderWorkerSet whose leader serves.

The leader's and workers' shell wrappers are run for real here, with stand-ins for
`ray`, `python3`, `vllm`, `msrun` and `infergate` on PATH that record what they were
given: the engine must receive exactly the argv rendered for it (JSON flags included).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infergate.api import InferenceDeploymentSpec
from infergate.api.inference_deployment import (
    GROUP_DEPLOYMENT_NAME_MAX,
    REPLICAS_MAX,
    STATEFUL_SET_NAME_MAX,
)
from infergate.api.topology import NODES_MAX
from infergate.plan.deployment.desired import drift_check_name, parity_check_name, recheck_name
from infergate.render import render_revision
from infergate.render.check_names import probe_name, report_name
from infergate.render.labels import engine_pod_selector
from infergate.render.mirror import mirror_name
from infergate.render.objects import RevisionObjects

_HASH_ANNOTATION = "infergate.io/revision-hash"


def _spec(engine: str = "vllm", **topology: Any) -> InferenceDeploymentSpec:
    gpu = engine == "vllm"
    document: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "uri": "pvc://models/llama"},
        "engine": {
            "kind": engine,
            "dtype": "bfloat16",
            "maxModelLen": 8192,
            "tensorParallelSize": 8 if gpu else 4,
            "config": {"rms_norm_eps": 1e-5},
        },
        "accelerator": {"kind": "nvidia-gpu" if gpu else "ascend-npu"},
        "rollout": {"autoPromote": False},
        "topology": topology,
    }
    return InferenceDeploymentSpec.model_validate(document)


def _two_nodes(engine: str = "vllm", **more: Any) -> InferenceDeploymentSpec:
    if engine == "vllm":
        return _spec(engine, nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2, **more)
    return _spec(
        engine, nodes=2, acceleratorsPerNode=8, pipelineParallelSize=2, dataParallelSize=2, **more
    )


def _render(spec: InferenceDeploymentSpec, replicas: int | None = None) -> RevisionObjects:
    return render_revision("llama", "llm", spec, replicas=replicas)


def _templates(objects: RevisionObjects) -> tuple[dict[str, Any], dict[str, Any]]:
    group = objects.deployment["spec"]["leaderWorkerTemplate"]
    return group["leaderTemplate"], group["workerTemplate"]


def _container(template: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = template["spec"]["containers"][0]
    return container


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_a_two_node_revision_is_one_leader_worker_set_of_groups_of_two() -> None:
    objects = _render(_two_nodes(), replicas=3)
    lws = objects.deployment
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    # Not the revision's own name: the LWS controller's headless Service takes it.
    assert lws["metadata"]["name"] == f"llama-{objects.revision}-group"
    assert lws["spec"]["replicas"] == 3
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    # The leader's readiness needs its workers: LeaderReady would never start them.
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"


def _names_taken(name: str, objects: RevisionObjects) -> set[str]:
    """Every Service and ConfigMap name the operator renders for deployment `name` and this
    revision: its own objects, the stable Service, the mirror's, and the probe Services and
    report ConfigMaps of the checks it makes of this revision (canary, gateway re-checks,
    drift runs)."""
    revision = objects.revision
    checks = [
        parity_check_name(name, revision),
        *(recheck_name(name, revision, step) for step in range(3)),
        *(drift_check_name(name, revision, run) for run in range(1, 4)),
    ]
    return {
        objects.config_map["metadata"]["name"],
        objects.service["metadata"]["name"],
        objects.stable_service["metadata"]["name"],
        mirror_name(name),
        *(probe_name(check, side) for check in checks for side in ("baseline", "candidate")),
        *(report_name(check) for check in checks),
    }


@pytest.mark.parametrize("name", ["llama", "a" * GROUP_DEPLOYMENT_NAME_MAX])
@pytest.mark.parametrize("engine", ["vllm", "mindformers"])
def test_the_groups_headless_service_name_is_free(name: str, engine: str) -> None:
    """The LWS controller makes each LeaderWorkerSet's headless Service (what publishes
    LWS_LEADER_ADDRESS) under the LeaderWorkerSet's own name, and makes none where a
    Service of that name exists: no Service or ConfigMap of ours may hold it."""
    objects = render_revision(name, "llm", _two_nodes(engine))
    headless = objects.deployment["metadata"]["name"]
    assert headless not in _names_taken(name, objects)
    assert objects.service["spec"].get("clusterIP") != "None"


def test_a_group_at_the_longest_allowed_name_gets_pods_and_host_names() -> None:
    """At the longest name a group may have, the LWS controller's objects are valid: the
    LeaderWorkerSet (and its headless Service) a DNS-1035 label, the last group's worker
    StatefulSet short enough for the StatefulSet controller to label its pods, and every
    pod name a hostname."""
    objects = render_revision("a" * GROUP_DEPLOYMENT_NAME_MAX, "llm", _two_nodes())
    lws = objects.deployment["metadata"]["name"]
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", lws)
    last_group = f"{lws}-{REPLICAS_MAX - 1}"  # the leader pod; its workers' StatefulSet
    assert len(last_group) <= STATEFUL_SET_NAME_MAX
    assert len(f"{last_group}-{NODES_MAX - 1}") <= 63  # its last worker pod
    longer = render_revision("a" * (GROUP_DEPLOYMENT_NAME_MAX + 1), "llm", _two_nodes())
    assert len(f"{longer.deployment['metadata']['name']}-{REPLICAS_MAX - 1}") > 52


def _watched(spec: InferenceDeploymentSpec) -> InferenceDeploymentSpec:
    """`spec` with the drift watch on (a rollout parity template with a watch)."""
    document = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    document["rollout"]["parity"] = {
        "suite": {"configMapRef": {"name": "prompts", "key": "prompts.jsonl"}},
        "watch": {"intervalSeconds": 86400},
    }
    return InferenceDeploymentSpec.model_validate(document)


def test_with_the_drift_watch_the_leaders_wait_for_the_operators_readiness_gate() -> None:
    """A restarted group serves again only once re-checked: its leader is Ready only when
    the operator sets infergate.io/checked True. Workers serve nobody and carry no gate; the
    revision is the same (the watch is no part of the hash)."""
    plain = _render(_two_nodes())
    watched = _render(_watched(_two_nodes()))
    assert watched.revision == plain.revision
    leader, worker = _templates(watched)
    assert leader["spec"]["readinessGates"] == [{"conditionType": "infergate.io/checked"}]
    assert "readinessGates" not in worker["spec"]
    # Without the watch, a group renders as it always did.
    for template in _templates(plain):
        assert "readinessGates" not in template["spec"]
    one_node = _render(_watched(_spec())).deployment
    assert "readinessGates" not in one_node["spec"]["template"]["spec"]


def test_every_pod_of_a_group_carries_the_revision() -> None:
    objects = _render(_two_nodes())
    for template in _templates(objects):
        metadata = template["metadata"]
        assert metadata["labels"]["infergate.io/revision"] == objects.revision
        assert metadata["annotations"][_HASH_ANNOTATION] == f"sha256:{objects.revision_hash}"


def test_the_services_reach_the_leaders_only() -> None:
    objects = _render(_two_nodes())
    leader, worker = _templates(objects)
    for selector in (
        objects.service["spec"]["selector"],
        objects.stable_service["spec"]["selector"],
        engine_pod_selector("llama"),
    ):
        assert _matches(selector, leader["metadata"]["labels"])
        assert not _matches(selector, worker["metadata"]["labels"])
    assert "readinessProbe" in _container(leader)
    assert "readinessProbe" not in _container(worker)
    assert "ports" not in _container(worker)
    assert "prometheus.io/scrape" not in worker["metadata"]["annotations"]


def test_each_pod_requests_one_nodes_devices() -> None:
    for template in _templates(_render(_two_nodes())):
        resources = _container(template)["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == "8"
        assert resources["requests"]["nvidia.com/gpu"] == "8"


def test_the_vllm_leader_serves_with_ray_over_the_group() -> None:
    leader, _ = _templates(_render(_two_nodes()))
    argv = _container(leader)["args"]
    assert argv[:2] == ["vllm", "serve"]
    assert _flag(argv, "--tensor-parallel-size") == "8"
    assert _flag(argv, "--pipeline-parallel-size") == "2"
    assert _flag(argv, "--distributed-executor-backend") == "ray"
    # The pinned flags of one pod are all still there.
    for flag in ("--dtype", "--max-model-len", "--seed", "--generation-config", "--hf-overrides"):
        assert flag in argv


def test_tensor_parallel_across_nodes_still_names_the_pipeline() -> None:
    leader, _ = _templates(_render(_spec(nodes=2, acceleratorsPerNode=4)))
    argv = _container(leader)["args"]
    assert _flag(argv, "--tensor-parallel-size") == "8"
    assert _flag(argv, "--pipeline-parallel-size") == "1"


def test_data_and_expert_parallel_flags() -> None:
    spec = _spec(nodes=2, acceleratorsPerNode=8, dataParallelSize=2, expertParallel=True)
    argv = _container(_templates(_render(spec))[0])["args"]
    assert _flag(argv, "--data-parallel-size") == "2"
    assert _flag(argv, "--data-parallel-backend") == "ray"
    assert "--enable-expert-parallel" in argv


def test_one_node_pipeline_parallel_needs_no_ray() -> None:
    spec = InferenceDeploymentSpec.model_validate(
        {
            "model": {"name": "m", "uri": "pvc://models/m"},
            "engine": {"kind": "vllm", "dtype": "bfloat16", "maxModelLen": 4096,
                       "tensorParallelSize": 2},
            "accelerator": {"kind": "nvidia-gpu"},
            "rollout": {"autoPromote": False},
            "topology": {"pipelineParallelSize": 2},
        }
    )  # fmt: skip
    objects = _render(spec)
    assert objects.deployment["kind"] == "Deployment"
    container = objects.deployment["spec"]["template"]["spec"]["containers"][0]
    assert _flag(container["args"], "--pipeline-parallel-size") == "2"
    assert "--distributed-executor-backend" not in container["args"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_the_engine_config_records_the_topology() -> None:
    objects = _render(_two_nodes())
    config = json.loads(objects.config_map["data"]["engine.json"])
    assert config["topology"]["nodes"] == 2
    assert config["topology"]["pipelineParallelSize"] == 2


def test_mindformers_parallel_config_spans_the_group() -> None:
    objects = _render(_two_nodes("mindformers", expertParallel=True))
    parallel = json.loads(objects.config_map["data"]["engine.json"])["mindformers"][
        "parallel_config"
    ]
    assert parallel == {
        "data_parallel": 2,
        "model_parallel": 4,
        "pipeline_stage": 2,
        "expert_parallel": 2,
    }
    for template in _templates(objects):
        assert _container(template)["resources"]["limits"]["huawei.com/Ascend910"] == "8"


# -- the wrappers, run ------------------------------------------------------------------------


def _stand_ins(tmp_path: Path, alive: int) -> Path:
    """Executables that record their argv as one JSON line in calls.jsonl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = (
        f"#!{sys.executable}\nimport json, os, sys\n"
        f'open({str(tmp_path / "calls.jsonl")!r}, "a").write('
        'json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")\n'
    )
    for name in ("ray", "vllm", "msrun", "infergate"):
        path = bin_dir / name
        path.write_text(record)
        path.chmod(0o755)
    # The leader counts live Ray nodes through python3 -c: answer `alive`.
    counter = bin_dir / "python3"
    counter.write_text(f"#!/bin/sh\necho {alive}\n")
    counter.chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, container: dict[str, Any], alive: int, **env: str) -> list[list[str]]:
    bin_dir = _stand_ins(tmp_path, alive)
    command = container["command"]
    subprocess.run(
        [*command, *container["args"]],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "POD_IP": "10.0.0.5", **env},
        check=True,
        timeout=60,
    )
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_vllm_leader_starts_a_ray_head_then_runs_the_exact_argv(tmp_path: Path) -> None:
    leader, _ = _templates(_render(_two_nodes()))
    container = _container(leader)
    calls = _run(tmp_path, container, alive=2, LWS_GROUP_SIZE="2")
    assert calls[0][:2] == ["ray", "start"]
    assert "--head" in calls[0]
    assert "--node-ip-address=10.0.0.5" in calls[0]
    assert calls[-1] == container["args"]


def test_a_vllm_leader_whose_group_never_gathers_gives_up(tmp_path: Path) -> None:
    leader, _ = _templates(_render(_two_nodes()))
    container = _container(leader)
    # A shortened deadline: the script's own arithmetic, with the wait cut to none.
    script = container["command"][2].replace("+ 600", "+ 0")
    with pytest.raises(subprocess.CalledProcessError):
        _run(tmp_path, {**container, "command": ["sh", "-c", script, "l"]}, 1, LWS_GROUP_SIZE="2")
    calls = (tmp_path / "calls.jsonl").read_text()
    assert '"vllm"' not in calls


def test_a_vllm_worker_joins_the_leaders_ray_head(tmp_path: Path) -> None:
    _, worker = _templates(_render(_two_nodes()))
    calls = _run(
        tmp_path, _container(worker), alive=2, LWS_LEADER_ADDRESS="llama-abc-0.llama-abc.llm"
    )
    assert calls == [
        [
            "ray", "start", "--address=llama-abc-0.llama-abc.llm:6379",
            "--node-ip-address=10.0.0.5", "--disable-usage-stats", "--block",
        ]
    ]  # fmt: skip


@pytest.mark.parametrize("index", ["0", "1"])
def test_every_ascend_pod_runs_msrun_over_the_group(tmp_path: Path, index: str) -> None:
    objects = _render(_two_nodes("mindformers"))
    template = _templates(objects)[int(index)]
    container = _container(template)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    calls = _run(
        tmp_path,
        container,
        alive=0,
        LWS_LEADER_ADDRESS="llama-abc-0.llama-abc.llm",
        LWS_WORKER_INDEX=index,
        INFERGATE_GROUP_DEVICES=env["INFERGATE_GROUP_DEVICES"],
        INFERGATE_POD_DEVICES=env["INFERGATE_POD_DEVICES"],
    )
    assert len(calls) == 1
    msrun = calls[0]
    assert msrun[0] == "msrun"
    assert "--worker_num=16" in msrun
    assert "--local_worker_num=8" in msrun
    assert f"--node_rank={index}" in msrun
    assert "--master_addr=llama-abc-0.llama-abc.llm" in msrun
    # The task script is the adapter's own entry point, then its argv unchanged.
    task = msrun.index(next(a for a in msrun if a.endswith("/infergate")))
    assert msrun[task + 1 :] == container["args"][1:]
