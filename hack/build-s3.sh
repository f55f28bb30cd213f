#!/usr/bin/env bash
# Builds a real S3-compatible server from its Go module, once per version, for the golden
# record store's tests: Versity S3 Gateway (github.com/versity/versitygw, Apache-2.0), which
# serves a local directory over the S3 API (posix backend). The binary lands in
# $INFERGATE_CACHE/bin/versitygw-<version>/versitygw and is reused when present.
#
# Why not SeaweedFS (github.com/seaweedfs/seaweedfs/weed, which does build with Go 1.26):
# its one binary links every cloud SDK and database driver it can talk to, 1738 packages
# and 99 MB of Go source outside the standard library, more than the whole control plane
# (83 MB, about 10 minutes on two cores), so more than 10 minutes here; versitygw is 588
# packages and 28 MB. Both counted with `go list -deps`.
set -euo pipefail

VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
CACHE=${INFERGATE_CACHE:-$HOME/.cache/infergate}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[build-s3] %s\n' "$*" >&2; }

bin="$CACHE/bin/versitygw-$VERSITYGW_VERSION"
if [ -x "$bin/versitygw" ]; then
  log "versitygw $VERSITYGW_VERSION cached"
  exit 0
fi
rm -rf "$bin.tmp"
mkdir -p "$bin.tmp"
log "building versitygw $VERSITYGW_VERSION"
start=$(date +%s)
GOBIN="$bin.tmp" go install -trimpath -ldflags "-s -w" \
  "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
rm -rf "$bin"
mv "$bin.tmp" "$bin"
log "built $bin/versitygw in $(( $(date +%s) - start ))s"
