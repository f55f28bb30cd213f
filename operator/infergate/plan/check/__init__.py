"""The ParityCheck lifecycle: a check and its children in, a plan out (pure).

Entry point: `lifecycle.decide(state.CheckState) -> state.CheckPlan`. `observed` reads a
check and its children into records, `sides` resolves each side's revision (shared with
the runner), `runner` gives the runner its objects, `status` writes verdicts and
conditions (and `spec_digest`, which binds a verdict to the spec it judged). `owned` is a
check as its owner InferenceDeployment sees it, read by the rollout and the drift watch;
`stamp` what the operator writes on a check it makes (the suite's content digest, the
spec digest) so that its verdict is bound.
"""
