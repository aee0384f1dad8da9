#!/usr/bin/env bash
# Builds tests/velero-client (Velero v1.18.3's plugin client, driven by a
# JSON script) once per machine, like tools/velero/build.sh builds Velero's
# server. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/velero-client-<hash of its sources>/
# and is reused while it exists; only its path goes to stdout.
# Cold (empty Go build cache, modules downloaded), on 2 cores: see the README.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "velero-client build: $*" >&2; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/velero-client-$key"
if [[ -x "$out/velero-client" ]]; then
  echo "$out/velero-client"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$out/velero-client" ]]; then
  started=$SECONDS
  log "building"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/velero-client.tmp" .)
  mv "$out/velero-client.tmp" "$out/velero-client"
  log "built in $((SECONDS - started)) s"
fi
echo "$out/velero-client"
