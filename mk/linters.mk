# The manifest linters platform teams run, on the kustomize base and overlays, the chart
# (per supported Kubernetes version) and the objects the operator renders for
# manifests/examples: helm lint --strict, kubeconform (schemas generated from each version's
# own API server, since the published ones cannot be fetched here), kube-score and checkov.
# Each tool is cached by version (hack/lint-tools.sh); not part of `make test` (several
# minutes on a 2-core machine). docs/install.md ("Linters") has the figures and explains
# each remaining finding.
#
#   make lint-tools      build/install the linters into $(INFERGATE_CACHE)
#   make lint-manifests  run them; counts per linter and input, details in out/lint/

.PHONY: lint-tools lint-manifests

lint-tools:
	hack/lint-tools.sh all

lint-manifests: venv platform-tools lint-tools control-plane control-plane-matrix
	$(PY) hack/lint-manifests.py
