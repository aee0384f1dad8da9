#!/usr/bin/env bash
# Builds one Go command from the Go module in MODULE_DIR, once per machine,
# into ${XDG_CACHE_HOME:-$HOME/.cache}/iar/NAME-<hash of go.mod>/NAME, and
# prints only that path (progress goes to stderr). Concurrent runs wait
# for the first and reuse its binary.
#
#   tools/go-cli.sh MODULE_DIR NAME PACKAGE
#
# tools/restic/build.sh and tools/kopia/build.sh are this with their
# module, name and package.
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 MODULE_DIR NAME PACKAGE" >&2; exit 2; }

here="$(cd "$1" && pwd)"
name="$2"
package="$3"
log() { echo "$name build: $*" >&2; }
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(sha256sum <"$here/go.mod" | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/$name-$key"
if [[ -x "$out/$name" ]]; then
  echo "$out/$name"
  exit 0
fi
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$out/$name" ]]; then
  started=$SECONDS
  log "building $name (a minute or two the first time)"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "$package")
  mv "$out/$name.tmp" "$out/$name"
  log "built in $((SECONDS - started)) s"
fi
echo "$out/$name"
