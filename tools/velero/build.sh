#!/usr/bin/env bash
# Builds the real components of iar's Velero tests, once per machine:
#
#   velero                  the server and CLI, github.com/vmware-tanzu/velero v1.18.3
#   velero-plugin-for-aws   its S3 object store plugin, v1.14.3
#   versitygw               an S3 server over a directory (Apache-2.0), v1.8.0
#
# Each is its own Go module here (velero/, aws-plugin/, versitygw/), pinned
# by its go.mod and go.sum. The binaries land in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/velero-tools-<hash of the go.mod files>/
# and are reused while they exist. Only that directory goes to stdout;
# progress and timings go to stderr. Cold, on 2 cores: about 2–3 minutes each.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "velero tools build: $*" >&2; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(cat "$here"/velero/go.mod "$here"/aws-plugin/go.mod "$here"/versitygw/go.mod | sha256sum | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/velero-tools-$key"
tools=(velero velero-plugin-for-aws versitygw)

built() {
  local t
  for t in "${tools[@]}"; do [[ -x "$out/$t" ]] || return 1; done
}

if built; then
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9

build() {
  local dir="$1" pkg="$2" name="$3"
  [[ -x "$out/$name" ]] && return 0
  local started=$SECONDS
  (cd "$here/$dir" && go mod download)
  log "building $name ($pkg)"
  # nice: other builds share this machine's cores.
  (cd "$here/$dir" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  log "built $name in $((SECONDS - started)) s"
}

build velero github.com/vmware-tanzu/velero/cmd/velero velero
build aws-plugin github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws velero-plugin-for-aws
build versitygw github.com/versity/versitygw/cmd/versitygw versitygw
echo "$out"
