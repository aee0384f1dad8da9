#!/usr/bin/env bash
# Builds the Velero side of iar's tests from ONE Go module, once per machine:
#
#   velero                  the server and CLI, github.com/vmware-tanzu/velero v1.18.3
#   velero-plugin-for-aws   its S3 object store plugin, v1.14.3
#   versitygw               an S3 server over a directory (Apache-2.0), v1.8.0
#   velero-client           Velero's own plugin client driven by a JSON
#                           script (velero-client/main.go here)
#   velero-store-reader     every backup of a store read with Velero's own
#                           persistence code (velero-store-reader/main.go)
#
# One go.mod for all four: Go's minimal version selection gives every
# shared module one version, the highest any of them asks for (versitygw
# raises the AWS SDK, msgp and a few others above what Velero v1.18.3
# pins; holding them at Velero's versions broke versitygw's build), with
# Velero's own `replace`s (its kopia fork) repeated. Shared packages
# (client-go 0.33, controller-runtime, Velero's own, the AWS SDK) then
# compile once, in a single `go build`; the Velero tests are what says the
# raised versions work.
# The binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/iar/velero-tools-<hash>/
# (a hash of go.mod and the client's source) and are reused while they
# exist. Only that directory goes to stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "velero tools build: $*" >&2; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(cat "$here/go.mod" "$here/velero-client/main.go" "$here/velero-store-reader/main.go" | sha256sum | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/velero-tools-$key"
declare -A packages=(
  [velero]=github.com/vmware-tanzu/velero/cmd/velero
  [velero-plugin-for-aws]=github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws
  [versitygw]=github.com/versity/versitygw/cmd/versitygw
  [velero-client]=./velero-client
  [velero-store-reader]=./velero-store-reader
)

missing() {
  local t
  for t in velero velero-plugin-for-aws versitygw velero-client velero-store-reader; do
    [[ -x "$out/$t" ]] || echo "$t"
  done
}

if [[ -z "$(missing)" ]]; then
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
mapfile -t tools < <(missing)
if [[ ${#tools[@]} -gt 0 ]]; then
  wanted=()
  for t in "${tools[@]}"; do wanted+=("${packages[$t]}"); done
  started=$SECONDS
  log "building ${tools[*]} (several minutes the first time)"
  build="$out/.build"
  rm -rf "$build"
  mkdir -p "$build"
  # nice: other builds share this machine's cores. With several packages,
  # -o names a directory and each binary is named after its package.
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$build/" "${wanted[@]}")
  for t in "${tools[@]}"; do mv "$build/$t" "$out/$t"; done
  rmdir "$build"
  log "built ${tools[*]} in $((SECONDS - started)) s"
fi
echo "$out"
