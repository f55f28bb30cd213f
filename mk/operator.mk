# The InferenceDeployment controller (issue 4): its integration tests and rollout benchmark.
#
#   make test-controller   unit tests of the planner, then the controller on the local cluster
#                          (the operator runs as a pod from manifests/operator)
#   make bench-rollout     median and p99 from `kubectl apply` of a spec change to the canary
#                          Deployment existing, with 50 deployments on the simulated nodes

ROLLOUT_BENCH_DEPLOYMENTS ?= 50
ROLLOUT_BENCH_OUT ?= out/bench-rollout.json

.PHONY: test-controller bench-rollout

test-controller: setup cluster-up
	$(BIN)/pytest tests/unit/plan tests/integration/test_controller_rollout.py \
		tests/integration/test_controller_manual.py tests/integration/test_controller_lifecycle.py

bench-rollout: cluster-up
	@mkdir -p $(dir $(ROLLOUT_BENCH_OUT))
	$(PY) bench/rollout_bench.py --deployments $(ROLLOUT_BENCH_DEPLOYMENTS) --out $(ROLLOUT_BENCH_OUT)
