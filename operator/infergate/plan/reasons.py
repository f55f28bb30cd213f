"""Condition types, condition reasons and Event reasons of an InferenceDeployment, in one place.

Reasons are one CamelCase word (metav1.Condition); the same words name the
Events posted when a condition changes, so `kubectl describe` and
`kubectl get idep -o yaml` tell one story.
"""

from __future__ import annotations

from typing import Final

# Condition types.
AVAILABLE: Final = "Available"
PROGRESSING: Final = "Progressing"
PARITY_PASSED: Final = "ParityPassed"
CONFIG_DRIFTED: Final = "ConfigDrifted"
DEGRADED: Final = "Degraded"
CONDITION_TYPES: Final = (AVAILABLE, PROGRESSING, PARITY_PASSED, CONFIG_DRIFTED, DEGRADED)

# Available.
MINIMUM_REPLICAS_AVAILABLE: Final = "MinimumReplicasAvailable"
REPLICAS_UNAVAILABLE: Final = "ReplicasUnavailable"
NO_STABLE_REVISION: Final = "NoStableRevision"
SCALED_TO_ZERO: Final = "ScaledToZero"

# Progressing: True while a rollout moves.
REVISION_CREATED: Final = "RevisionCreated"
CANARY_STARTED: Final = "CanaryStarted"
AWAITING_PARITY: Final = "AwaitingParity"
AWAITING_PROMOTION: Final = "AwaitingPromotion"
PROMOTING: Final = "Promoting"
# Progressing: False once it stopped, for good or bad.
ROLLOUT_COMPLETE: Final = "RolloutComplete"
ROLLED_BACK: Final = "RolledBack"
PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"
UNSCHEDULABLE: Final = "Unschedulable"
INVALID_SPEC: Final = "InvalidSpec"
REVISION_LOST: Final = "RevisionLost"

# ParityPassed.
PARITY_CHECK_PASSED: Final = "CheckPassed"
PARITY_CHECK_FAILED: Final = "CheckFailed"
PARITY_CHECK_ERROR: Final = "CheckError"
PARITY_CHECK_PENDING: Final = "CheckPending"
NO_PARITY_CHECK: Final = "NoParityCheck"
PROMOTED_BY_HAND: Final = "PromotedByHand"

# ConfigDrifted.
DRIFT_REVERTED: Final = "DriftReverted"
NO_DRIFT: Final = "NoDrift"

# Degraded.
HEALTHY: Final = "Healthy"

# Event-only reasons (actions rather than states).
PARITY_CHECK_CREATED: Final = "ParityCheckCreated"
MANUAL_ACTION_REFUSED: Final = "ManualActionRefused"
MANUAL_ACTION: Final = "ManualAction"

# Why a revision was rolled back (promotion/rollback metric labels, record messages).
ROLLBACK_PARITY_FAILED: Final = "ParityFailed"
ROLLBACK_PARITY_ERROR: Final = "ParityError"
ROLLBACK_DEADLINE: Final = PROGRESS_DEADLINE_EXCEEDED
ROLLBACK_ABORTED: Final = "Aborted"
ROLLBACK_BY_HAND: Final = "RollbackByHand"
PROMOTION_AUTOMATIC: Final = "ParityPassed"
PROMOTION_BY_HAND: Final = "ByHand"
