"""Pure decisions: observed state in, writes, conditions and status out. No network, no
API server, no files.

A room per resource and concern; a room imports only the rooms below it
(deployment -> drift -> check -> the shared modules here, which import no room):

    deployment/   the InferenceDeployment rollout: which revisions run at what size, the
                  canary's fate, traffic, the promotion's order, the children to write, status
                  (`deployment.reconcile.plan_reconcile`)
    drift/        the drift watch of the stable revision: when a run starts and what its
                  verdict means (`drift.watch.decide_drift`)
    check/        the ParityCheck lifecycle: sides, probes, runner, verdict status
                  (`check.lifecycle.decide`), a check as its owner deployment sees it
                  (`check.owned`), and what the operator stamps on one it makes
                  (`check.stamp`)

Shared by every room:

    reasons       every condition type and reason string
    conditions    `metav1.Condition`-shaped updates (`set_condition`)
    phases        the phase shown to people, derived from conditions
    readiness     Ready, Reconciling and Stalled for tools (kubectl wait, kstatus, Argo CD),
                  derived from conditions
    notices       Events and metric counts a decision hands back
    metadata      index keys and timestamps read from any object
    ownership     whether an object was made by the controller it should have been (a
                  revision's pod: by its recorded Deployment, through a ReplicaSet)
    freshness     whether a watched copy is current enough to decide from
    leadership    the operator's leader election over a Lease
"""
