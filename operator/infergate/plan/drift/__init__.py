"""The drift watch of a deployment's stable revision (pure).

Entry point: `watch.decide_drift(state.DriftInput) -> state.DriftPlan`. `schedule`
decides when the next run starts, `verdict` what a finished run's verdict means and
whether it rolls back. The rollout gathers the input and applies the plan
(`plan.deployment.drift`).
"""
