#!/usr/bin/env bash
# Builds the local cluster's binaries from Go modules, once per version:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes),
# etcd (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok). Binaries land in
# $INFERGATE_CACHE/bin/<component>-<version>/ and are reused when present. The Gateway API
# CRDs (standard channel) come from the sigs.k8s.io/gateway-api module's
# config/crd/standard into $INFERGATE_CACHE/gateway-api-<version>/
# (`infergate-dev localcluster up` installs them). The LeaderWorkerSet CRD comes the same
# way from the sigs.k8s.io/lws module's config/crd/bases into $INFERGATE_CACHE/lws-<version>/.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# v1.7 needs Go 1.27; the machine has 1.26. Before Kubernetes 1.31, v1.4.1: from v1.5 the
# standard TLSRoute CRD uses CEL's isIP(), which a 1.30 API server does not have
# (GATEWAY_API_VERSION_BEFORE_1_31 in dev/infergate_dev/localcluster/layout.py).
k8s_minor=${K8S_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
if [ "$k8s_minor" -lt 31 ]; then
  GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.4.1}
else
  GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.6.3}
fi
# v0.9.0 declares go 1.26 (the machine's); multi-node revisions render its v1 API.
LWS_VERSION=${LWS_VERSION:-v0.9.0}
CACHE=${INFERGATE_CACHE:-$HOME/.cache/infergate}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

# Two checkouts (or `make -j`) building at once would share the .tmp directories:
# the second waits for the first and then finds the binaries cached.
mkdir -p "$CACHE"
exec 9>"$CACHE/.build-control-plane.lock"
flock 9

k8s_bin="$CACHE/bin/kubernetes-$K8S_VERSION"
etcd_bin="$CACHE/bin/etcd-$ETCD_VERSION"
kwok_bin="$CACHE/bin/kwok-$KWOK_VERSION"
gateway_api_dir="$CACHE/gateway-api-$GATEWAY_API_VERSION"
lws_dir="$CACHE/lws-$LWS_VERSION"
lws_bin="$CACHE/bin/lws-$LWS_VERSION"

# The staging module's tag, or the newest earlier patch of its minor the proxy serves.
served_staging() {
  local module=$1 tag=$2 patch
  patch=${tag##*.}
  while [ "$patch" -ge 0 ]; do
    local candidate="${tag%.*}.$patch"
    if (cd / && go mod download -json "$module@$candidate" 2>/dev/null) | jq -e '.Error == null' >/dev/null; then
      echo "$candidate"; return
    fi
    patch=$((patch - 1))
  done
  log "no patch of $module ${tag%.*} is served"; return 1
}

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=0
  for b in "${want[@]}"; do [ -x "$k8s_bin/$b" ] || missing=1; done
  [ "$missing" = 0 ] && { log "kubernetes $K8S_VERSION cached"; return; }
  local staging=${K8S_VERSION/v1./v0.}
  local mod="$CACHE/src/kubernetes-$K8S_VERSION"
  mkdir -p "$mod" "$k8s_bin.tmp"
  log "building kubernetes $K8S_VERSION (staging $staging) in $mod"
  (
    cd "$mod"
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .GoMod)
    {
      echo "module infergate.local/kubernetes-build"
      echo
      echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      # Every staging module that k8s.io/kubernetes replaces with ./staging/...
      # is taken at its published tag instead; where the module proxy does not serve that
      # tag (v1.31.14: kube-scheduler, kube-controller-manager and endpointslice), at the
      # newest earlier patch it serves, said here and in the binaries' STAGING file.
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk '{print $1}' \
        | while read -r module; do
            echo "replace $module => $module $(served_staging "$module" "$staging")"
          done
    } > go.mod
    grep -E '^replace ' go.mod | awk -v v="$staging" '$5 != v {print $2 " " $5 " (tag " v " not served)"}' \
      > "$k8s_bin.tmp/STAGING"
    [ -s "$k8s_bin.tmp/STAGING" ] && log "staging modules at an earlier patch: $(tr '\n' ';' < "$k8s_bin.tmp/STAGING")"
    cat > tools.go <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go mod tidy -e >/dev/null 2>&1 || true
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ld=""
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
      ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    for b in "${want[@]}"; do
      log "go build $b"
      go build -trimpath -ldflags "-s -w $ld" -o "$k8s_bin.tmp/$b" "k8s.io/kubernetes/cmd/$b"
    done
  )
  rm -rf "$k8s_bin"; mv "$k8s_bin.tmp" "$k8s_bin"
}

build_etcd() {
  [ -x "$etcd_bin/etcd" ] && { log "etcd $ETCD_VERSION cached"; return; }
  local mod="$CACHE/src/etcd-$ETCD_VERSION"
  mkdir -p "$mod" "$etcd_bin.tmp"
  log "building etcd $ETCD_VERSION"
  (
    cd "$mod"
    cat > go.mod <<MOD
module infergate.local/etcd-build

go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy -e >/dev/null 2>&1 || true
    go build -trimpath -ldflags "-s -w" -o "$etcd_bin.tmp/etcd" go.etcd.io/etcd/server/v3
  )
  rm -rf "$etcd_bin"; mv "$etcd_bin.tmp" "$etcd_bin"
}

build_kwok() {
  [ -x "$kwok_bin/kwok" ] && [ -d "$kwok_bin/stage" ] && { log "kwok $KWOK_VERSION cached"; return; }
  mkdir -p "$kwok_bin.tmp"
  log "building kwok $KWOK_VERSION"
  GOBIN="$kwok_bin.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | jq -r .Dir)
  cp -r "$dir/kustomize/stage" "$kwok_bin.tmp/stage"
  chmod -R u+w "$kwok_bin.tmp/stage"
  rm -rf "$kwok_bin"; mv "$kwok_bin.tmp" "$kwok_bin"
}

fetch_gateway_api() {
  [ -d "$gateway_api_dir/crds" ] && { log "gateway-api $GATEWAY_API_VERSION cached"; return; }
  log "fetching the Gateway API CRDs $GATEWAY_API_VERSION"
  local dir
  dir=$(go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" | jq -r .Dir)
  mkdir -p "$gateway_api_dir.tmp/crds"
  cp "$dir"/config/crd/standard/*.yaml "$gateway_api_dir.tmp/crds/"
  chmod -R u+w "$gateway_api_dir.tmp"
  rm -rf "$gateway_api_dir"; mv "$gateway_api_dir.tmp" "$gateway_api_dir"
}

fetch_lws() {
  [ -d "$lws_dir/crds" ] && { log "lws $LWS_VERSION cached"; return; }
  log "fetching the LeaderWorkerSet CRD $LWS_VERSION"
  local dir
  dir=$(go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" | jq -r .Dir)
  mkdir -p "$lws_dir.tmp/crds"
  cp "$dir"/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml "$lws_dir.tmp/crds/"
  chmod -R u+w "$lws_dir.tmp"
  rm -rf "$lws_dir"; mv "$lws_dir.tmp" "$lws_dir"
}

# The LeaderWorkerSet controller (manager) from its module, through a wrapper module as the
# others, with the one other CRD it watches (DisaggregatedSet): not part of `all`, the local
# cluster runs it only when asked (`localcluster up --with lws`, dev/.../localcluster/lws.py).
build_lws_controller() {
  lws_controller_crds() {
    local dir
    dir=$(cd "$CACHE/src/lws-$LWS_VERSION" && go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" | jq -r .Dir)
    mkdir -p "$1/crds"
    cp "$dir"/config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml "$1/crds/"
    chmod -R u+w "$1/crds"
  }
  if [ -x "$lws_bin/lws-manager" ]; then
    [ -d "$lws_bin/crds" ] || lws_controller_crds "$lws_bin"
    log "lws controller $LWS_VERSION cached"; return
  fi
  local mod="$CACHE/src/lws-$LWS_VERSION"
  mkdir -p "$mod" "$lws_bin.tmp"
  log "building the lws controller $LWS_VERSION in $mod"
  (
    cd "$mod"
    printf 'module infergate.local/lws-build\n\ngo %s\n\nrequire sigs.k8s.io/lws %s\n' \
      "$(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')" "$LWS_VERSION" > go.mod
    go build -trimpath -o "$lws_bin.tmp/lws-manager" \
      -ldflags "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$LWS_VERSION" sigs.k8s.io/lws/cmd
  )
  lws_controller_crds "$lws_bin.tmp"
  rm -rf "$lws_bin"; mv "$lws_bin.tmp" "$lws_bin"
}

what=${1:-all}
case "$what" in
  all) build_etcd; build_kwok; build_kubernetes; fetch_gateway_api; fetch_lws ;;
  gateway-api) fetch_gateway_api ;;
  lws) fetch_lws ;;
  lws-controller) build_lws_controller ;;
  kubernetes) build_kubernetes ;;
  etcd) build_etcd ;;
  kwok) build_kwok ;;
  *) echo "usage: $0 [all|kubernetes|etcd|kwok|gateway-api|lws|lws-controller]" >&2; exit 2 ;;
esac
