# The end-to-end flow on the local cluster (issue 7): the e2e tests and the demo script.
# Both need the cluster up (the pytest session fixture brings it up when it is not),
# the engine venvs and the fixture model (`make engines`).
#
#   make test-e2e      the tests/e2e suite alone, with each test's wall time
#   make demo-flow     demo/demo.py: install, deploy, migrate, catch a bad change, report
#
# The Makefile's `demo` target is meant to run `demo-flow` after `setup engines cluster-up`.

DEMO_OUT ?= out/demo

.PHONY: test-e2e demo-flow

test-e2e: setup engines
	$(BIN)/pytest tests/e2e -s -p no:cacheprovider --durations=0

demo-flow: venv engines
	$(PY) demo/demo.py --out $(DEMO_OUT)
