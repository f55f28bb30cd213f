#!/usr/bin/env bash
# The tools a platform team uses around the operator, installed once per version:
#   helm        built from its Go module (helm.sh/helm/v4), like the control plane
#   prometheus  prometheus and promtool from Debian's package, unpacked without installing
#   chromium    Debian's chromium (a system package: apt-get install when missing)
# Binaries land in $INFERGATE_CACHE/bin/helm-<version>/ and
# $INFERGATE_CACHE/prometheus-<version>/ and are reused when present.
# `hack/platform-tools.sh path helm|prometheus|promtool` prints where a binary is.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v4.3.2}
# Debian bookworm's package (the release this machine's apt sources carry).
PROMETHEUS_DEB_VERSION=${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}
CACHE=${INFERGATE_CACHE:-$HOME/.cache/infergate}

log() { printf '[platform-tools] %s\n' "$*" >&2; }

helm_dir="$CACHE/bin/helm-$HELM_VERSION"
prometheus_dir="$CACHE/prometheus-$PROMETHEUS_DEB_VERSION"

build_helm() {
  [ -x "$helm_dir/helm" ] && { log "helm $HELM_VERSION cached"; return; }
  log "building helm $HELM_VERSION from helm.sh/helm/v4"
  rm -rf "$helm_dir.tmp"; mkdir -p "$helm_dir.tmp"
  local ld="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
  ld+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
  GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$helm_dir.tmp" \
    go install -trimpath -ldflags "$ld" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  rm -rf "$helm_dir"; mv "$helm_dir.tmp" "$helm_dir"
}

fetch_prometheus() {
  [ -x "$prometheus_dir/bin/prometheus" ] && [ -x "$prometheus_dir/bin/promtool" ] \
    && { log "prometheus $PROMETHEUS_DEB_VERSION cached"; return; }
  log "unpacking Debian's prometheus $PROMETHEUS_DEB_VERSION"
  local work="$prometheus_dir.tmp"
  rm -rf "$work"; mkdir -p "$work/deb" "$work/root"
  (
    cd "$work/deb"
    apt-get download "prometheus=$PROMETHEUS_DEB_VERSION" >/dev/null 2>&1 || {
      log "apt-get download failed; refreshing the package lists once"
      apt-get update >/dev/null
      apt-get download "prometheus=$PROMETHEUS_DEB_VERSION" >/dev/null
    }
  )
  dpkg -x "$work"/deb/prometheus_*.deb "$work/root"
  mkdir -p "$work/bin"
  mv "$work/root/usr/bin/prometheus" "$work/root/usr/bin/promtool" "$work/bin/"
  rm -rf "$work/deb" "$work/root"
  "$work/bin/promtool" --version >/dev/null
  rm -rf "$prometheus_dir"; mv "$work" "$prometheus_dir"
}

install_chromium() {
  command -v chromium >/dev/null && { log "chromium present: $(command -v chromium)"; return; }
  log "installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 || {
    apt-get update >/dev/null
    apt-get install -y -q chromium >/dev/null
  }
}

what=${1:-all}
case "$what" in
  all) build_helm; fetch_prometheus; install_chromium ;;
  helm) build_helm ;;
  prometheus) fetch_prometheus ;;
  chromium) install_chromium ;;
  path)
    case "${2:-}" in
      helm) echo "$helm_dir/helm" ;;
      prometheus | promtool) echo "$prometheus_dir/bin/$2" ;;
      *) echo "usage: $0 path helm|prometheus|promtool" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: $0 [all|helm|prometheus|chromium|path NAME]" >&2; exit 2 ;;
esac
