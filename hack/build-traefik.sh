#!/usr/bin/env bash
# Builds a real Gateway API implementation from its Go module, once per version, for the test
# that sends requests through the HTTPRoutes infergate renders: Traefik
# (github.com/traefik/traefik/v3, MIT) with its Kubernetes Gateway provider. The binary lands
# in $INFERGATE_CACHE/bin/traefik-<version>/traefik and is reused when present.
#
# Traefik's go.mod has `replace` directives, which `go install ...@version` refuses, so it is
# built in a wrapper module (like the control plane) that requires it and repeats them.
# v3.6.12 is the newest that builds from the module proxy alone: v3.7.x needs modules the
# proxy does not serve. The module and build caches are Go's defaults, shared with the
# control plane's build (many of the same Kubernetes client modules).
set -euo pipefail

TRAEFIK_VERSION=${TRAEFIK_VERSION:-v3.6.12}
CACHE=${INFERGATE_CACHE:-$HOME/.cache/infergate}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[build-traefik] %s\n' "$*" >&2; }

bin="$CACHE/bin/traefik-$TRAEFIK_VERSION"
if [ -x "$bin/traefik" ]; then
  log "traefik $TRAEFIK_VERSION cached"
  exit 0
fi

# Two checkouts building at once would share the .tmp directory: the second waits for the
# first and then finds the binary cached.
mkdir -p "$CACHE"
exec 9>"$CACHE/.build-traefik.lock"
flock 9
if [ -x "$bin/traefik" ]; then
  log "traefik $TRAEFIK_VERSION cached"
  exit 0
fi

mod="$CACHE/src/traefik-$TRAEFIK_VERSION"
rm -rf "$bin.tmp"
mkdir -p "$mod" "$bin.tmp"
log "building traefik $TRAEFIK_VERSION in $mod"
start=$(date +%s)
(
  cd "$mod"
  gomod=$(go mod download -json "github.com/traefik/traefik/v3@$TRAEFIK_VERSION" | jq -r .GoMod)
  {
    echo "module infergate.local/traefik-build"
    echo
    echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')"
    echo
    echo "require github.com/traefik/traefik/v3 $TRAEFIK_VERSION"
    echo
    # The replace block of Traefik's own go.mod (forks it builds with), taken as is.
    awk '/^replace \($/ {on=1; next} on && /^\)$/ {on=0} on && /=>/ {print "replace " $0}' "$gomod"
    grep -E '^replace [^(]' "$gomod" || true
  } > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/traefik/traefik/v3/cmd/traefik"\n' \
    > tools.go
  go mod tidy -e >/dev/null 2>&1 || true
  ld="-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION"
  ld+=" -X github.com/traefik/traefik/v3/pkg/version.Codename=infergate"
  ld+=" -X github.com/traefik/traefik/v3/pkg/version.BuildDate=1970-01-01T00:00:00Z"
  go build -trimpath -ldflags "$ld" -o "$bin.tmp/traefik" github.com/traefik/traefik/v3/cmd/traefik
)
"$bin.tmp/traefik" version >"$bin.tmp/VERSION"
grep -q "$TRAEFIK_VERSION" "$bin.tmp/VERSION"
rm -rf "$bin"
mv "$bin.tmp" "$bin"
log "built $bin/traefik in $(( $(date +%s) - start ))s"
