#!/usr/bin/env bash
# The manifest linters a platform team runs on an install, cached by version like the
# control plane (hack/build-control-plane.sh) and helm (hack/platform-tools.sh):
#   kubeconform  built from its Go module (github.com/yannh/kubeconform)
#   kube-score   built from its Go module (github.com/zegl/kube-score)
#   checkov      from PyPI, in a venv of its own (never the project's: its pins clash)
# Binaries land in $INFERGATE_CACHE/bin/<tool>-<version>/, checkov's venv in
# $INFERGATE_CACHE/venvs/checkov-<version>/. `hack/lint-tools.sh path TOOL` prints where a
# tool is. kubeconform's schemas are generated from each API server's own OpenAPI
# (hack/lint-manifests.py), since the published schema repositories cannot be reached here.
set -euo pipefail

KUBECONFORM_VERSION=${KUBECONFORM_VERSION:-v0.8.0}
KUBE_SCORE_VERSION=${KUBE_SCORE_VERSION:-v1.20.0}
CHECKOV_VERSION=${CHECKOV_VERSION:-3.3.30}
CACHE=${INFERGATE_CACHE:-$HOME/.cache/infergate}

log() { printf '[lint-tools] %s\n' "$*" >&2; }

kubeconform_dir="$CACHE/bin/kubeconform-$KUBECONFORM_VERSION"
kube_score_dir="$CACHE/bin/kube-score-$KUBE_SCORE_VERSION"
checkov_venv="$CACHE/venvs/checkov-$CHECKOV_VERSION"

go_install() {  # DIR MODULE/CMD@VERSION
  local dir=$1 target=$2
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$dir.tmp" \
    go install -trimpath -ldflags "-s -w" "$target"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

build_kubeconform() {
  [ -x "$kubeconform_dir/kubeconform" ] && { log "kubeconform $KUBECONFORM_VERSION cached"; return; }
  log "building kubeconform $KUBECONFORM_VERSION"
  go_install "$kubeconform_dir" "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
}

build_kube_score() {
  [ -x "$kube_score_dir/kube-score" ] && { log "kube-score $KUBE_SCORE_VERSION cached"; return; }
  log "building kube-score $KUBE_SCORE_VERSION"
  go_install "$kube_score_dir" "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION"
}

install_checkov() {
  [ -e "$checkov_venv/.complete" ] && { log "checkov $CHECKOV_VERSION cached"; return; }
  log "installing checkov $CHECKOV_VERSION into $checkov_venv"
  # A venv's scripts name its directory, so it is built in place; .complete marks it whole.
  rm -rf "$checkov_venv"
  python3 -m venv "$checkov_venv"
  "$checkov_venv/bin/pip" install -q --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  "$checkov_venv/bin/checkov" --version >/dev/null
  touch "$checkov_venv/.complete"
}

what=${1:-all}
case "$what" in
  all) build_kubeconform; build_kube_score; install_checkov ;;
  kubeconform) build_kubeconform ;;
  kube-score) build_kube_score ;;
  checkov) install_checkov ;;
  path)
    case "${2:-}" in
      kubeconform) echo "$kubeconform_dir/kubeconform" ;;
      kube-score) echo "$kube_score_dir/kube-score" ;;
      checkov) echo "$checkov_venv/bin/checkov" ;;
      *) echo "usage: $0 path kubeconform|kube-score|checkov" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: $0 [all|kubeconform|kube-score|checkov|path TOOL]" >&2; exit 2 ;;
esac
