# Packaging for real clusters (issue 8): runtime images, image locks, the
# kustomize install, the Grafana dashboard and the kubectl plugin.
# Nothing here needs a Docker engine except `images-build`.

IMAGE_REGISTRY ?= ghcr.io/infergate
OPERATOR_IMAGE ?= $(IMAGE_REGISTRY)/infergate:0.1.0
VLLM_ENGINE_IMAGE ?= $(IMAGE_REGISTRY)/engine-vllm:0.32.0
MINDFORMERS_ENGINE_IMAGE ?= $(IMAGE_REGISTRY)/engine-mindformers:1.9.0-ms2.9.0
DOCKER ?= docker
KUBECTL ?= .cluster/bin/kubectl --kubeconfig .cluster/kubeconfig

.PHONY: images images-build images-lint image-locks test-packaging manifests-check

# The build commands, for a machine with a Docker engine (run from the repo root).
images:
	@echo "$(DOCKER) build -f runtime_images/operator/Dockerfile -t $(OPERATOR_IMAGE) ."
	@echo "$(DOCKER) build -f runtime_images/vllm/Dockerfile -t $(VLLM_ENGINE_IMAGE) ."
	@echo "$(DOCKER) build -f runtime_images/mindformers/Dockerfile -t $(MINDFORMERS_ENGINE_IMAGE) ."

images-build:
	$(DOCKER) build -f runtime_images/operator/Dockerfile -t $(OPERATOR_IMAGE) .
	$(DOCKER) build -f runtime_images/vllm/Dockerfile -t $(VLLM_ENGINE_IMAGE) .
	$(DOCKER) build -f runtime_images/mindformers/Dockerfile -t $(MINDFORMERS_ENGINE_IMAGE) .

images-lint: venv
	$(BIN)/hadolint runtime_images/*/Dockerfile

# Regenerate the images' dependency locks from the venvs the tests use.
image-locks: venv
	$(PY) -m tests.unit.packaging.lockfiles

test-packaging: venv
	$(BIN)/pytest tests/unit/packaging tests/integration/test_install.py tests/integration/test_kubectl_plugin.py

# What `kubectl apply -k manifests/` would create, validated by the local API server
# (a dry run creates nothing, so the install namespace must exist beforehand).
manifests-check: cluster-up
	$(KUBECTL) get namespace infergate-system >/dev/null 2>&1 || $(KUBECTL) create namespace infergate-system
	$(KUBECTL) apply --dry-run=server -k manifests/
