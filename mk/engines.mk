# Engine venvs, the fixture model and the engine experiment (issue 6).
# Each engine lives in its own venv, cached by version under
# $(INFERGATE_CACHE)/venvs/ with a stamp written only after a full install;
# The venvs hold nothing of a checkout: processes started from them get this
# clone's operator/ on PYTHONPATH, so one cached venv serves every checkout at once.

# Bump the -rN suffix when hack/engine-venv.sh or the MindFormers image lock
# (runtime_images/mindformers/requirements.txt) changes what a venv holds.
VLLM_VENV ?= $(INFERGATE_CACHE)/venvs/vllm-0.32.0-torch2.13.0-r1
MINDFORMERS_VENV ?= $(INFERGATE_CACHE)/venvs/mindformers-1.9.0-ms2.9.0-r2
ENGINE_PYTHON ?= python3.11
ENGINE_STAMP := .infergate-installed
export INFERGATE_VLLM_VENV := $(VLLM_VENV)
export INFERGATE_MINDFORMERS_VENV := $(MINDFORMERS_VENV)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

EXPERIMENT_OUT ?= out/experiment

.PHONY: engines engine-venvs vllm-venv mindformers-venv fixture-model experiment test-engines \
        vllm-ray lws-controller

$(VLLM_VENV)/$(ENGINE_STAMP):
	hack/engine-venv.sh vllm $(VLLM_VENV) $(ENGINE_PYTHON)
	touch $@

$(MINDFORMERS_VENV)/$(ENGINE_STAMP):
	hack/engine-venv.sh mindformers $(MINDFORMERS_VENV) $(ENGINE_PYTHON)
	touch $@

# Put the commands engine pods run (infergate, vllm) on each venv's PATH (cheap;
# re-done every time).
define _engine_commands
	$(1)/bin/python hack/engine-commands.py
endef

vllm-venv: $(VLLM_VENV)/$(ENGINE_STAMP)
	$(call _engine_commands,$(VLLM_VENV))

mindformers-venv: $(MINDFORMERS_VENV)/$(ENGINE_STAMP)
	$(call _engine_commands,$(MINDFORMERS_VENV))

engine-venvs: vllm-venv mindformers-venv

# Ray over the vLLM venv, for groups of vLLM pods (render/group.py runs `ray start` in
# each): a layer of its own beside the venv, cached by Ray and vLLM versions, put on the
# venv's path by a .pth. Not part of `engines`: only what runs a group needs it.
RAY_LAYER ?= $(INFERGATE_CACHE)/layers/ray-2.60.0-vllm-0.32.0-r1

$(RAY_LAYER)/$(ENGINE_STAMP): $(VLLM_VENV)/$(ENGINE_STAMP)
	hack/ray-layer.sh install $(VLLM_VENV) $(RAY_LAYER)
	touch $@

vllm-ray: vllm-venv $(RAY_LAYER)/$(ENGINE_STAMP)
	hack/ray-layer.sh link $(VLLM_VENV) $(RAY_LAYER)

# The real group on the executor (tests/integration/test_vllm_group_on_executor.py, marked
# slow) needs the Ray layer and the LeaderWorkerSet controller (cached by version).
lws-controller:
	hack/build-control-plane.sh lws-controller

test-slow: vllm-ray lws-controller

# The fixture model is generated (never downloaded) and cached by generator version.
fixture-model: vllm-venv
	PYTHONPATH=$(CURDIR)/operator $(VLLM_VENV)/bin/python -m infergate.cli fixture

engines: engine-venvs fixture-model

# Reproduce the seed study's precision comparison on the fixture model.
experiment: venv engines
	$(PY) experiments/engine_parity.py --out $(EXPERIMENT_OUT)

# The engine tests fail (rather than skip) here when a venv or the model is missing.
test-engines: venv engines
	INFERGATE_REQUIRE_ENGINES=1 $(BIN)/pytest -m engines tests/engines
