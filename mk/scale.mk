# Scale and soak of the installed operator on the local cluster (bench/scale_bench.py,
# bench/soak.py; figures and how to read them: experiments/SCALE.md).
#
#   make bench-scale   500 InferenceDeployments and 100 waiting ParityChecks, side by side
#                      with kube-controller-manager's Deployment controller: apply -> canary
#                      latency, operator RSS, API requests (idle and per reconcile), CPU;
#                      beside 3000 ConfigMaps infergate does not manage, 5 updates/s to them
#   make soak          a change every few seconds for SOAK_MINUTES (default 30): RSS first
#                      vs last ten minutes, objects per kind over time
#
# Both install the operator from manifests/ into infergate-system, watching only their own
# namespace, and remove it again; they stop by themselves. Shorter runs for a smoke test:
#   make bench-scale SCALE_DEPLOYMENTS=50 SCALE_CHECKS=10 SCALE_IDLE_SECONDS=20
#   make soak SOAK_MINUTES=3 SOAK_COMPARE_MINUTES=1

SCALE_DEPLOYMENTS ?= 500
SCALE_CHECKS ?= 100
SCALE_IDLE_SECONDS ?= 60
SCALE_UNRELATED ?= 3000
SCALE_UNRELATED_CHURN ?= 5
SCALE_OUT ?= out/bench-scale.json
SCALE_MARKDOWN ?= out/bench-scale.md

SOAK_DEPLOYMENTS ?= 10
SOAK_MINUTES ?= 30
SOAK_INTERVAL ?= 5
SOAK_MAX_CHANGES ?= 1000
SOAK_COMPARE_MINUTES ?= 10
SOAK_OUT ?= out/soak.json
SOAK_MARKDOWN ?= out/soak.md

.PHONY: bench-scale soak

bench-scale: cluster-up
	@mkdir -p $(dir $(SCALE_OUT))
	$(PY) bench/scale_bench.py --deployments $(SCALE_DEPLOYMENTS) --checks $(SCALE_CHECKS) \
		--idle-seconds $(SCALE_IDLE_SECONDS) --unrelated $(SCALE_UNRELATED) \
		--unrelated-churn $(SCALE_UNRELATED_CHURN) --out $(SCALE_OUT) --markdown $(SCALE_MARKDOWN)

soak: cluster-up
	@mkdir -p $(dir $(SOAK_OUT))
	$(PY) bench/soak.py --deployments $(SOAK_DEPLOYMENTS) --minutes $(SOAK_MINUTES) \
		--interval $(SOAK_INTERVAL) --max-changes $(SOAK_MAX_CHANGES) \
		--compare-minutes $(SOAK_COMPARE_MINUTES) --out $(SOAK_OUT) --markdown $(SOAK_MARKDOWN)
