"""A revision whose replica spans nodes: one LeaderWorkerSet (sigs.k8s.io/lws) group per
replica, a leader that serves the API and `topology.nodes - 1` workers.

Pure: a pod template rendered as for one node in, the LeaderWorkerSet out.

- vLLM: the leader starts a Ray head, waits until every pod of its group has joined the
  Ray cluster, then runs the same `vllm serve` line as one pod would, with
  `--distributed-executor-backend ray` and the pipeline size (render/vllm.py). Workers
  start a Ray node joined to the leader (`LWS_LEADER_ADDRESS`, set by the LWS controller
  in every container of the group) and block on it. This is the layout of vLLM's own
  multi-node example (examples/online_serving/multi-node-serving.sh) and of its LWS
  deployment guide.
- MindFormers: every pod runs `msrun` (MindSpore's launcher for its dynamic cluster):
  `worker_num` = the group's devices, `local_worker_num` = this pod's, `node_rank` =
  `LWS_WORKER_INDEX`, the scheduler on the leader (`master_addr` = `LWS_LEADER_ADDRESS`).
  The rank table (which device of which pod holds which rank, and the devices' addresses
  for HCCL) is assembled at startup by msrun's scheduler from the group's pods as their
  processes register: the device addresses exist only on the nodes, so no static
  RANK_TABLE_FILE is rendered.

Group policy, and why:
- restartPolicy RecreateGroupOnPodRestart: a rank that restarts alone cannot rejoin its
  engine's collectives; the whole group is made again, never a group that mixes an old
  and a new process.
- startupPolicy LeaderCreated: the leader's readiness is the engine's `/health`, which
  answers only once every worker has joined. LeaderReady would hold the workers back
  until the leader is ready, and so never start them (lws pkg/controllers/
  pod_controller.go defers the worker StatefulSet until the leader pod is Ready). Workers
  instead retry joining until the leader's head is up.
- Every pod of the group carries the revision label and hash annotation; workers are
  labelled component `engine-worker`, so Services and checks that select engine pods
  reach the leaders only.
"""

from __future__ import annotations

import copy
from typing import Any

from infergate.api.enums import EngineKind
from infergate.render.labels import LABEL_COMPONENT
from infergate.render.launch import ENGINE_GRACE_SECONDS

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
COMPONENT_WORKER = "engine-worker"
RAY_PORT = 6379
MSRUN_MASTER_PORT = 8118
JOIN_TIMEOUT_SECONDS = 600
"""How long a leader waits for its group to gather (and a worker for the leader's head)
before it exits; the group is then made again (RecreateGroupOnPodRestart)."""
CHECKED_GATE = "infergate.io/checked"
"""The readiness gate of a group's leader with the drift watch on: the operator sets it True
once the group is whole, and holds it False after a restart until a drift run passes, so
the leader is no ready endpoint of its Services meanwhile (docs/multi-node.md)."""
MSRUN_LOG_DIR = "/tmp/msrun"  # noqa: S108 - msrun's per-process logs, inside the container

# `$@` is the engine's own argv, passed as positional parameters: no quoting of its JSON.
_VLLM_LEADER = f"""set -eu
ray start --head --port={RAY_PORT} --node-ip-address="$POD_IP" --disable-usage-stats
deadline=$(( $(date +%s) + {JOIN_TIMEOUT_SECONDS} ))
until [ "$(python3 -c 'import ray; ray.init(address="auto", logging_level="ERROR"); \
print(sum(1 for n in ray.nodes() if n["Alive"]))')" -ge "$LWS_GROUP_SIZE" ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "the group did not gather $LWS_GROUP_SIZE Ray nodes in {JOIN_TIMEOUT_SECONDS}s" >&2
    exit 1
  fi
  sleep 5
done
exec "$@"
"""
_VLLM_WORKER = f"""set -u
deadline=$(( $(date +%s) + {JOIN_TIMEOUT_SECONDS} ))
until ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --node-ip-address="$POD_IP" \
--disable-usage-stats --block; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "no Ray head at $LWS_LEADER_ADDRESS:{RAY_PORT} in {JOIN_TIMEOUT_SECONDS}s" >&2
    exit 1
  fi
  sleep 5
done
"""
# Every pod runs the same msrun line; the leader's (node_rank 0) also starts the scheduler.
_MSRUN = """set -eu
exec msrun --worker_num="$INFERGATE_GROUP_DEVICES" --local_worker_num="$INFERGATE_POD_DEVICES" \
--master_addr="$LWS_LEADER_ADDRESS" --master_port={port} --node_rank="$LWS_WORKER_INDEX" \
--log_dir={log_dir} --join=True --cluster_time_out={timeout} "$(command -v "$1")" "${{@:2}}"
"""


def _msrun_script() -> str:
    # `${@:2}` is bash; run under bash.
    return _MSRUN.format(
        port=MSRUN_MASTER_PORT, log_dir=MSRUN_LOG_DIR, timeout=JOIN_TIMEOUT_SECONDS
    )


def group_commands(
    engine: EngineKind, command: list[str], args: list[str]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(leader, worker) container `command`/`args` around the engine's own argv."""
    argv = [*command, *args]
    if engine is EngineKind.VLLM:
        leader = {"command": ["sh", "-c", _VLLM_LEADER, "vllm-leader"], "args": argv}
        worker = {"command": ["sh", "-c", _VLLM_WORKER, "vllm-worker"], "args": []}
        return leader, worker
    both = {"command": ["bash", "-c", _msrun_script(), "msrun-node"], "args": argv}
    return both, copy.deepcopy(both)


def group_env(engine: EngineKind, *, group_devices: int, pod_devices: int) -> list[dict[str, Any]]:
    """What every pod of a group is told about it (LWS adds LWS_* itself)."""
    env = [
        {"name": "INFERGATE_GROUP_DEVICES", "value": str(group_devices)},
        {"name": "INFERGATE_POD_DEVICES", "value": str(pod_devices)},
    ]
    if engine is EngineKind.VLLM:
        # vLLM and Ray bind the pod's own address, never a guess from the hostname.
        env.insert(0, {"name": "VLLM_HOST_IP", "value": "$(POD_IP)"})
    return env


def _with_container(
    template: dict[str, Any], launch: dict[str, list[str]], env: list[dict[str, Any]]
) -> dict[str, Any]:
    result = copy.deepcopy(template)
    container = result["spec"]["containers"][0]
    container.update(launch)
    container["env"] = [*container["env"], *env]
    return result


def _worker(template: dict[str, Any]) -> dict[str, Any]:
    """A worker pod: the leader's pod, minus what belongs to the one that serves."""
    worker = copy.deepcopy(template)
    worker["metadata"]["labels"][LABEL_COMPONENT] = COMPONENT_WORKER
    for key in ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path"):
        worker["metadata"]["annotations"].pop(key, None)
    container = worker["spec"]["containers"][0]
    # No HTTP server: the group's readiness is the leader's /health, which answers only
    # with every rank up; a worker whose Ray node or msrun exits ends its container.
    for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
        container.pop(key, None)
    worker["spec"]["terminationGracePeriodSeconds"] = ENGINE_GRACE_SECONDS
    return worker


def leader_worker_set(
    metadata: dict[str, Any],
    *,
    engine: EngineKind,
    template: dict[str, Any],
    replicas: int,
    size: int,
    group_devices: int,
    pod_devices: int,
    checked_gate: bool = False,
) -> dict[str, Any]:
    """The LeaderWorkerSet of a revision: `replicas` groups of `size` pods; with
    `checked_gate` (the drift watch on) the leaders carry the readiness gate CHECKED_GATE."""
    container = template["spec"]["containers"][0]
    leader_launch, worker_launch = group_commands(engine, container["command"], container["args"])
    env = group_env(engine, group_devices=group_devices, pod_devices=pod_devices)
    leader = _with_container(template, leader_launch, env)
    if checked_gate:
        # Only the leader serves (workers are no endpoint of any Service).
        leader["spec"]["readinessGates"] = [{"conditionType": CHECKED_GATE}]
    worker = _worker(_with_container(template, worker_launch, env))
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            # One group at a time, never more groups than asked: accelerators cannot surge.
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }
