"""Condition types, condition reasons and Event reasons of both kinds, in one place.

Reasons are one CamelCase word (metav1.Condition); the same words name the
Events posted when a condition changes, so `kubectl describe` and
`kubectl get idep -o yaml` tell one story. The first part is the
InferenceDeployment's, the second the ParityCheck's.
"""

from __future__ import annotations

from typing import Final

# Condition types.
AVAILABLE: Final = "Available"
PROGRESSING: Final = "Progressing"
PARITY_PASSED: Final = "ParityPassed"
CONFIG_DRIFTED: Final = "ConfigDrifted"
DEGRADED: Final = "Degraded"
DRIFTED: Final = "Drifted"
CONDITION_TYPES: Final = (AVAILABLE, PROGRESSING, PARITY_PASSED, CONFIG_DRIFTED, DEGRADED, DRIFTED)

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
# A promotion, step by step (plan.deployment.promotion): the new stable grows to full size,
# then traffic moves to it, then the previous one keeps its pods for scaleDownDelaySeconds.
PROMOTION_SCALING_UP: Final = "PromotionScalingUp"
PROMOTION_SWITCHING: Final = "PromotionSwitching"
PROMOTION_SCALE_DOWN_DELAY: Final = "PromotionScaleDownDelay"
TRAFFIC_STEPPING: Final = "TrafficStepping"
# A passed canary waits: the Service or HTTPRoute clients use is someone else's object.
TRAFFIC_HELD: Final = "TrafficHeld"
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
PARITY_CHECK_INCONCLUSIVE: Final = "CheckInconclusive"
PARITY_CHECK_UNBOUND: Final = "CheckNotBound"
NO_PARITY_CHECK: Final = "NoParityCheck"

# ConfigDrifted.
DRIFT_REVERTED: Final = "DriftReverted"
NO_DRIFT: Final = "NoDrift"

# Degraded.
HEALTHY: Final = "Healthy"
NAME_TAKEN: Final = "NameTaken"

# Drifted (only while rollout.parity.watch is set): what the latest drift run of the
# stable revision found against its own golden record, or why none can run.
DRIFT_DETECTED: Final = "DriftDetected"
NO_DRIFT_DETECTED: Final = "NoDriftDetected"
DRIFT_CHECK_PENDING: Final = "DriftCheckPending"
DRIFT_CHECK_INCONCLUSIVE: Final = "DriftCheckInconclusive"
DRIFT_CHECK_ERROR: Final = "DriftCheckError"
DRIFT_CHECK_NOT_BOUND: Final = "DriftCheckNotBound"
DRIFT_WATCH_WAITING: Final = "DriftWatchWaiting"
DRIFT_WATCH_PAUSED: Final = "DriftWatchPaused"
# A group of the stable revision restarted (a pod replaced or restarted): the last verdict
# does not speak for its new processes until a drift run re-checks it.
GROUP_RESTARTED: Final = "GroupRestarted"
# The readiness gate infergate.io/checked of a group leader (plan/deployment/gates.py).
GROUP_CHECKED: Final = "GroupChecked"
AWAITING_DRIFT_CHECK: Final = "AwaitingDriftCheck"
NO_GOLDEN_RECORD: Final = "NoGoldenRecord"
GOLDEN_STORE_NOT_CONFIGURED: Final = "GoldenStoreNotConfigured"

# Ready, Reconciling and Stalled (both kinds): the types tools read (kubectl wait, kstatus,
# Flux, Argo CD), derived from the kind's own conditions by plan.readiness. Their reasons are
# those of the condition they are read from, and these.
READY: Final = "Ready"
RECONCILING: Final = "Reconciling"
STALLED: Final = "Stalled"
READINESS_CONDITION_TYPES: Final = (READY, RECONCILING, STALLED)
# The rollout is complete but the stable revision serves fewer pods than spec.replicas.
WAITING_FOR_REPLICAS: Final = "WaitingForReplicas"

# Event-only reasons (actions rather than states).
PARITY_CHECK_CREATED: Final = "ParityCheckCreated"
MANUAL_ACTION_REFUSED: Final = "ManualActionRefused"
MANUAL_ACTION: Final = "ManualAction"
DRIFT_CHECK_CREATED: Final = "DriftCheckCreated"
DRIFT_ROLLBACK_REFUSED: Final = "DriftRollbackRefused"

# Why a revision was rolled back (promotion/rollback metric labels, record messages).
ROLLBACK_PARITY_FAILED: Final = "ParityFailed"
ROLLBACK_PARITY_ERROR: Final = "ParityError"
ROLLBACK_PARITY_INCONCLUSIVE: Final = "ParityInconclusive"
ROLLBACK_DEADLINE: Final = PROGRESS_DEADLINE_EXCEEDED
ROLLBACK_ABORTED: Final = "Aborted"
ROLLBACK_BY_HAND: Final = "RollbackByHand"
PROMOTION_AUTOMATIC: Final = "ParityPassed"
PROMOTION_BY_HAND: Final = "ByHand"
ROLLBACK_STEP_FAILED: Final = "TrafficStepFailed"
# A drift run of the stable revision failed and onDrift.action is rollback.
ROLLBACK_DRIFT: Final = "DriftRollback"


# --- ParityCheck ------------------------------------------------------------------------

# Condition types. Complete is True once the check ended; exactly one of Passed, Failed,
# Inconclusive and Error is then True.
CHECK_COMPLETE: Final = "Complete"
CHECK_PASSED: Final = "Passed"
CHECK_FAILED: Final = "Failed"
CHECK_INCONCLUSIVE: Final = "Inconclusive"
CHECK_ERROR: Final = "Error"
CHECK_RUNNER_ERROR: Final = "RunnerError"
CHECK_RELEASED: Final = "ResourcesReleased"
CHECK_CONDITION_TYPES: Final = (
    CHECK_COMPLETE,
    CHECK_PASSED,
    CHECK_FAILED,
    CHECK_INCONCLUSIVE,
    CHECK_ERROR,
    CHECK_RUNNER_ERROR,
    CHECK_RELEASED,
)

# Reasons: while it runs.
CHECK_WAITING_FOR_SIDES: Final = "WaitingForSides"
CHECK_WAITING_FOR_PROBES: Final = "WaitingForProbes"
CHECK_RUNNER_STARTED: Final = "RunnerStarted"
CHECK_RUNNER_RUNNING: Final = "RunnerRunning"
CHECK_RECOVERED: Final = "Recovered"
CHECK_CHILDREN_DELETED: Final = "ChildrenDeleted"
# No Complete condition yet: the controller has not looked at the check.
CHECK_NOT_STARTED: Final = "NotStarted"
# Reasons: how it ended.
CHECK_PARITY_PASSED: Final = "ParityPassed"
CHECK_PARITY_FAILED: Final = "ParityFailed"
CHECK_NOT_ENOUGH_EVIDENCE: Final = "NotEnoughEvidence"
CHECK_COULD_NOT_MEASURE: Final = "CouldNotMeasure"
CHECK_DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
CHECK_RUNNER_FAILED: Final = "RunnerFailed"
CHECK_NO_VERDICT: Final = "NoVerdict"
CHECK_PROBE_FAILED: Final = "ProbeFailed"
# A side is a multi-node group whose hidden states no probe gives (plan/check/sides.py).
CHECK_HIDDEN_STATES_UNAVAILABLE: Final = "HiddenStatesUnavailable"
CHECK_SIDE_UNREACHABLE: Final = "SideUnreachable"
CHECK_INVALID: Final = "InvalidCheck"
CHECK_CHILD_NOT_OURS: Final = "ChildNotOurs"
# The suite ConfigMap holds other prompts than the digest the check's spec pins: it was
# edited after the check was made (plan.check.stamp).
CHECK_SUITE_CHANGED: Final = "SuiteChanged"
# An object the runner reads to reach or describe a side (a revision's ConfigMap or
# Service, a probe or mirror Service) is not controlled by the owner infergate made it
# for: someone else made it, and what it says cannot be trusted (plan.ownership).
CHECK_SIDE_OBJECT_NOT_OURS: Final = "SideObjectNotOurs"
# Event-only reasons.
CHECK_PROBE_STARTED: Final = "ProbeStarted"
