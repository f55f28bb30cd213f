# What platform teams install and watch (issue: Helm chart, Prometheus, alerts, browser
# report tests, API reference). The tools are cached by version under $(INFERGATE_CACHE):
#
#   hack/platform-tools.sh   helm (built from helm.sh/helm/v4), prometheus + promtool
#                            (Debian's package, unpacked), chromium (Debian, apt-get)
#   make chart          regenerate charts/infergate from manifests/ (kustomize)
#   make chart-check    fail when charts/infergate differs from what manifests/ generate
#   make test-platform  the chart, alert-rule, dashboard, browser and API-reference tests
#   make prometheus     a Prometheus on loopback beside the local cluster (cluster-down stops it)

.PHONY: platform-tools chart chart-check test-platform prometheus

platform-tools:
	hack/platform-tools.sh all

# `make setup` (and so `make test` and `make demo`) installs them too.
setup: platform-tools

chart: venv control-plane
	$(BIN)/infergate-dev chart --out charts/infergate

chart-check: venv control-plane
	$(BIN)/infergate-dev chart --check charts/infergate

test: chart-check
# The chart is generated like the CRDs: checking one checks both, so neither drifts silently.
crds-check: chart-check

test-platform: setup
	$(BIN)/pytest tests/unit/monitoring tests/integration/test_helm_chart.py \
		tests/integration/test_dashboard_queries.py

prometheus: cluster-up platform-tools
	$(BIN)/infergate-dev localcluster prometheus up
