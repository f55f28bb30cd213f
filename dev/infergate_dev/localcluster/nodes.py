"""The nodes of the local cluster, as Kubernetes objects (pure).

Simulated accelerator nodes are played by KWOK (annotation
`kwok.x-k8s.io/node: fake`); they carry KWOK's fake taint, so only pods that
tolerate it land there (placement tests). The executor nodes run their pods
for real as local processes; engine pods land there because they tolerate the
accelerator taints but not the fake one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infergate_dev.localcluster.layout import kubernetes_version

GPU_RESOURCE = "nvidia.com/gpu"
ASCEND_RESOURCE = "huawei.com/Ascend910"
EXECUTOR_LABEL = "infergate.io/local-executor"
FAKE_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodeShape:
    """One node: its accelerator and whether KWOK or the executor plays it."""

    name: str
    accelerator: str  # "nvidia-gpu" | "ascend-npu" | "cpu"
    simulated: bool


NODES: tuple[NodeShape, ...] = (
    NodeShape("gpu-node-0", "nvidia-gpu", simulated=True),
    NodeShape("gpu-node-1", "nvidia-gpu", simulated=True),
    NodeShape("ascend-node-0", "ascend-npu", simulated=True),
    NodeShape("ascend-node-1", "ascend-npu", simulated=True),
    NodeShape("executor-gpu", "nvidia-gpu", simulated=False),
    NodeShape("executor-ascend", "ascend-npu", simulated=False),
    NodeShape("executor", "cpu", simulated=False),
)


def _accelerator_labels(accelerator: str) -> dict[str, str]:
    if accelerator == "nvidia-gpu":
        # As NVIDIA's GPU feature discovery labels them.
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81559",
            "nvidia.com/cuda.driver.major": "550",
        }
    if accelerator == "ascend-npu":
        # As the Ascend device plugin and Volcano's Ascend scheduling expect them.
        return {
            "accelerator": "huawei-Ascend910",
            "accelerator-type": "module-910b-8",
            "node.kubernetes.io/npu.chip.name": "910B3",
        }
    return {}


def _accelerator_taints(accelerator: str) -> list[dict[str, str]]:
    # GPU node pools are commonly tainted so that only GPU workloads land there;
    # the Ascend pools the same way with their resource name.
    if accelerator == "nvidia-gpu":
        return [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]
    if accelerator == "ascend-npu":
        return [{"key": ASCEND_RESOURCE, "value": "present", "effect": "NoSchedule"}]
    return []


def _capacity(accelerator: str, simulated: bool) -> dict[str, str]:
    capacity = {
        "cpu": "96" if simulated else "32",
        "memory": "1Ti" if simulated else "128Gi",
        "pods": "110",
        "ephemeral-storage": "1Ti",
    }
    if accelerator == "nvidia-gpu":
        capacity[GPU_RESOURCE] = "8"
    elif accelerator == "ascend-npu":
        capacity[ASCEND_RESOURCE] = "8"
    return capacity


def node_object(shape: NodeShape) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": shape.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": {
            "nvidia-gpu": "gpu-8x-h100",
            "ascend-npu": "npu-8x-910b",
            "cpu": "cpu-standard",
        }[shape.accelerator],
        **_accelerator_labels(shape.accelerator),
    }
    annotations: dict[str, str] = {}
    taints = _accelerator_taints(shape.accelerator)
    if shape.simulated:
        labels["type"] = "kwok"
        annotations["kwok.x-k8s.io/node"] = "fake"
        taints.append(dict(FAKE_TAINT))
    else:
        labels[EXECUTOR_LABEL] = "true"
    capacity = _capacity(shape.accelerator, shape.simulated)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": shape.name, "labels": labels, "annotations": annotations},
        "spec": {"providerID": f"infergate-local://{shape.name}", "taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": kubernetes_version(),
                "containerRuntimeVersion": "infergate-local://1",
            },
        },
    }


def simulated_nodes() -> list[NodeShape]:
    return [n for n in NODES if n.simulated]


def executor_nodes() -> list[NodeShape]:
    return [n for n in NODES if not n.simulated]
