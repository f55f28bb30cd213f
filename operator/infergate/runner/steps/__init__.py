"""The runner's steps: each reads the run's state, measures or writes one thing, fills in its part.

In the order a suite check runs them (`runner.modes` composes them per mode):

    start     read the check, load the suite, mark it Running
    resolve   resolve the sides (or the candidate beside a golden record), check health
    gate      fingerprints, profile and thresholds; then (after the baseline's noise is
              measured where none is kept: `runner.noise`) the limits, the comparison,
              a settled suite
    golden    open a golden baseline; stage records; commit them after the verdict
    drive     measure the suite into the comparison, with the runner's overhead
    judge     finalize the result, the regression test, the verdict
    localise  a failed check's first diverging layer
    load      load levels and performance, when the spec asks for them
    write     the report ConfigMap, then the terminal status

Every step is `step(run: RunContext, state: RunState) -> None`; a step that cannot
measure raises `RetryableRunError` or `CheckEndedError` (`runner.context`).
"""
