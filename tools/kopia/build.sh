#!/usr/bin/env bash
# Builds kopia's CLI from Velero v1.18.3's fork of github.com/kopia/kopia
# (Apache-2.0), once per machine, for bench/repository.sh: the uploader
# Velero's node agent runs, measured beside iar. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/kopia-<hash of go.mod>/kopia; only
# that path goes to stdout, progress to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "kopia build: $*" >&2; }
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(sha256sum <"$here/go.mod" | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/kopia-$key"
if [[ -x "$out/kopia" ]]; then
  echo "$out/kopia"
  exit 0
fi
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$out/kopia" ]]; then
  started=$SECONDS
  log "building kopia (a minute or two the first time)"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/kopia.tmp" github.com/kopia/kopia)
  mv "$out/kopia.tmp" "$out/kopia"
  log "built in $((SECONDS - started)) s"
fi
echo "$out/kopia"
