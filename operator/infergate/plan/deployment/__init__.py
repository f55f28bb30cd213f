"""The InferenceDeployment rollout: observed children in, writes and status out (pure).

Entry point: `reconcile.plan_reconcile` (and `reconcile.invalid_spec_status` for a spec
that cannot be used). It reads `observed` (the children as records) and `desired` (what
the spec renders to), decides with `rollout.decide`, whose steps are `canary`, `judge`,
`traffic`, `manual` (the `control` annotations), `drift` (the drift watch applied to the
rollout), `promotion` (a new stable at full size, then traffic, then the old one goes)
and `history` over the records in `state`; `sync` turns desired objects into
writes (`field_drift` finds edited fields), `status` builds conditions and the phase.
`wake` decides which watch events wake a reconcile; `revision_diff` says what changed
between two revisions.
"""
