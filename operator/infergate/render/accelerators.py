"""Accelerator presets: device resource, node selection, tolerations and host mounts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infergate.api.enums import AcceleratorKind


@dataclass(frozen=True)
class HostMount:
    """A read-only hostPath the engine needs from the node (e.g. the device driver)."""

    name: str
    path: str
    kind: str  # hostPath type: Directory or File


@dataclass(frozen=True)
class AcceleratorPreset:
    """What a pod needs to run on one accelerator family."""

    resource: str
    node_selector: dict[str, str]
    tolerations: tuple[dict[str, Any], ...]
    host_mounts: tuple[HostMount, ...] = field(default=())


PRESETS: dict[AcceleratorKind, AcceleratorPreset] = {
    AcceleratorKind.NVIDIA_GPU: AcceleratorPreset(
        resource="nvidia.com/gpu",
        node_selector={"nvidia.com/gpu.present": "true"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    ),
    AcceleratorKind.ASCEND_NPU: AcceleratorPreset(
        resource="huawei.com/Ascend910",
        node_selector={"accelerator": "huawei-Ascend910"},
        tolerations=(
            {"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"},
        ),
        host_mounts=(
            HostMount("ascend-driver", "/usr/local/Ascend/driver", "Directory"),
            HostMount("ascend-dcmi", "/usr/local/dcmi", "Directory"),
            HostMount("npu-smi", "/usr/local/bin/npu-smi", "File"),
        ),
    ),
}
