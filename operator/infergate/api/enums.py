"""Closed sets of values shared by the resources (they become schema enums)."""

from __future__ import annotations

from enum import StrEnum


class EngineKind(StrEnum):
    """Inference engine: vllm (NVIDIA GPU) or mindformers (MindFormers on MindSpore, Huawei Ascend
    NPU).
    """

    VLLM = "vllm"
    MINDFORMERS = "mindformers"


class AcceleratorKind(StrEnum):
    """Accelerator preset: nvidia-gpu (resource nvidia.com/gpu) or ascend-npu (resource
    huawei.com/Ascend910).
    """

    NVIDIA_GPU = "nvidia-gpu"
    ASCEND_NPU = "ascend-npu"


class DType(StrEnum):
    """Floating-point type, always explicit: float32, float16 or bfloat16 (never auto)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


# The only pairings that run: an engine is built for one accelerator family.
ENGINE_ACCELERATOR: dict[EngineKind, AcceleratorKind] = {
    EngineKind.VLLM: AcceleratorKind.NVIDIA_GPU,
    EngineKind.MINDFORMERS: AcceleratorKind.ASCEND_NPU,
}


class DeploymentPhase(StrEnum):
    """Rollout phase shown to people, derived from the conditions."""

    STABLE = "Stable"
    PROGRESSING = "Progressing"
    VERIFYING = "Verifying"
    PROMOTING = "Promoting"
    ROLLED_BACK = "RolledBack"
    FAILED = "Failed"


class PromotionStep(StrEnum):
    """Where a change of the stable revision stands: ScalingUp (the new stable grows to
    replicas while the previous one serves), Switching (it is ready; the stable Service and
    HTTPRoute move to it), ScaleDownDelay (the move was seen; the previous one keeps its pods
    until scaleDownDelaySeconds passed).
    """

    SCALING_UP = "ScalingUp"
    SWITCHING = "Switching"
    SCALE_DOWN_DELAY = "ScaleDownDelay"


class CheckPhase(StrEnum):
    """Phase of a parity check: Pending, Running, Passed, Failed (measured bad), Inconclusive (too
    little evidence to decide) or Error (could not measure).
    """

    PENDING = "Pending"
    RUNNING = "Running"
    PASSED = "Passed"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class VerdictOutcome(StrEnum):
    """Outcome of a parity check for a revision: Passed, Failed, Error, Inconclusive or Pending."""

    PASSED = "Passed"
    FAILED = "Failed"
    ERROR = "Error"
    INCONCLUSIVE = "Inconclusive"
    PENDING = "Pending"


class ConditionStatus(StrEnum):
    """Status of a condition: True, False or Unknown."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"
