#!/usr/bin/env bash
# Builds restic's CLI (github.com/restic/restic v0.18.1, BSD-2-Clause) from
# this Go module, once per machine, for the tests that read iar's volume
# repositories with restic itself. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/restic-<hash of go.mod>/restic; only
# that path goes to stdout, progress to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "restic build: $*" >&2; }
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(sha256sum <"$here/go.mod" | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/restic-$key"
if [[ -x "$out/restic" ]]; then
  echo "$out/restic"
  exit 0
fi
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$out/restic" ]]; then
  started=$SECONDS
  log "building restic (a minute or two the first time)"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/restic.tmp" github.com/restic/restic/cmd/restic)
  mv "$out/restic.tmp" "$out/restic"
  log "built in $((SECONDS - started)) s"
fi
echo "$out/restic"
