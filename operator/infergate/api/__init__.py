"""The custom resources of infergate.io/v1alpha1: pydantic models, the single source of the CRDs."""

from infergate.api.base import API_VERSION, GROUP, VERSION
from infergate.api.check_status import ParityCheckStatus, Verdict, VerdictReason
from infergate.api.deployment_status import InferenceDeploymentStatus, RevisionRecord
from infergate.api.enums import (
    AcceleratorKind,
    CheckPhase,
    DeploymentPhase,
    DType,
    EngineKind,
    VerdictOutcome,
)
from infergate.api.inference_deployment import InferenceDeployment, InferenceDeploymentSpec
from infergate.api.parity_check import ParityCheck, ParityCheckSpec, ParityCheckTemplate
from infergate.api.prompts import PromptItem, PromptSuite

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "AcceleratorKind",
    "CheckPhase",
    "DType",
    "DeploymentPhase",
    "EngineKind",
    "InferenceDeployment",
    "InferenceDeploymentSpec",
    "InferenceDeploymentStatus",
    "ParityCheck",
    "ParityCheckSpec",
    "ParityCheckStatus",
    "ParityCheckTemplate",
    "PromptItem",
    "PromptSuite",
    "RevisionRecord",
    "Verdict",
    "VerdictOutcome",
    "VerdictReason",
]
