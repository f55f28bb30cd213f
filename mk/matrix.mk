# The support matrix: `make test` runs one Kubernetes version (K8S_VERSION of
# dev/infergate_dev/localcluster/layout.py, v1.36); `make test-matrix` runs the tests marked
# `matrix` (the local cluster and KWOK, the kustomize install and its version overlay, the
# Helm chart's install with its version gate, a canary promoted, one rolled back and one
# moved by HTTPRoute weights against the Gateway API release the version takes) on each
# other supported version, each in a cluster of its own (.cluster-VERSION/), with that
# version's API server, controller-manager, scheduler and kubectl built from Go modules and
# cached as the default ones are. docs/install.md has the matrix table.
#
#   make control-plane-matrix   build (once, cached) the binaries of K8S_MATRIX_VERSIONS
#                               and fetch the Gateway API CRDs each takes
#   make test-matrix            the matrix tests on each of them

# The same list as MATRIX_K8S_VERSIONS in dev/infergate_dev/localcluster/layout.py (a unit
# test compares them): the newest patch the Go proxy serves of the oldest supported minor
# (1.30) and of the next. Each version also gets the Gateway API CRDs it can take (v1.4.1
# before 1.31: layout.py says why).
K8S_MATRIX_VERSIONS ?= v1.30.14 v1.31.14
MATRIX_TESTS := tests/cluster tests/integration

.PHONY: control-plane-matrix test-matrix

control-plane-matrix:
	for version in $(K8S_MATRIX_VERSIONS); do \
		K8S_VERSION=$$version hack/build-control-plane.sh kubernetes && \
		K8S_VERSION=$$version hack/build-control-plane.sh gateway-api || exit 1; done

# -rA lists each test that ran, passed or was skipped (and why) per version.
test-matrix: setup control-plane-matrix
	for version in $(K8S_MATRIX_VERSIONS); do \
		echo "== the support matrix on Kubernetes $$version"; \
		$(BIN)/pytest $(MATRIX_TESTS) -m matrix --kubernetes-version $$version -rA \
			|| { $(BIN)/infergate-dev localcluster --kubernetes-version $$version down; exit 1; }; \
		$(BIN)/infergate-dev localcluster --kubernetes-version $$version down; \
	done
	@echo "matrix passed on: $(K8S_MATRIX_VERSIONS) (and make test runs the default version)"
