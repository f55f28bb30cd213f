"""Pure rollout planning: observed state of an InferenceDeployment in, writes and status out.

`reconcile.plan_reconcile` is the entry point; `rollout` decides revisions and
the canary's fate, `sync` turns desired objects into writes (and finds drift),
`status` builds conditions and the phase. No network, no API server, no files.
"""
