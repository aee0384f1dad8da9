#!/usr/bin/env bash
# Builds the Velero framework's test guests (internal/testguests/*): Velero
# plugins written against Velero's own interfaces and types, over
# iar.dev/sdk/velero/framework, as iar components into OUT_DIR, and prints
# each path, one per line (the core module beside it, NAME.core.wasm).
#
#   go-sdk/velero/framework/build-testguests.sh OUT_DIR   (IAR=path/to/iar)
#
# Velero's module (v1.18.3, the framework's go.mod) and apimachinery come
# through the Go module proxy the environment names (GOPROXY), as
# tools/velero/build.sh's do. Core modules are cached by the hash of their
# inputs (the Go SDK's .go, go.mod and go.sum files, this script, the Go
# version) under ${XDG_CACHE_HOME:-$HOME/.cache}/iar/go-sdk-framework;
# componentizing is redone on every run, so that a changed iar is used.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sdk=$(cd "$here/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/iar/go-sdk-framework
mkdir -p "$cache"
iar=${IAR:-iar}
log() { echo "go-sdk/velero/framework/build-testguests.sh: $*" >&2; }
command -v go >/dev/null || { log "go not found: install Go >= 1.26"; exit 1; }
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

# Serialises concurrent runs on one cache.
exec 9>"$cache/.lock"
flock 9

inputs=$(cd "$sdk" && { find . \( -name '*.go' -o -name go.mod -o -name go.sum \) -print | sort | xargs cat; cat "$here/build-testguests.sh"; go version; } | sha256sum | cut -d' ' -f1)
for dir in "$here"/internal/testguests/*/; do
    name=framework-$(basename "$dir")
    core=$cache/$inputs/$name.core.wasm
    if [ ! -f "$core" ]; then
        log "go build (GOOS=wasip1) $name (a minute or two the first time)"
        mkdir -p "$cache/$inputs"
        # -mod=readonly: go.mod and go.sum are the committed ones.
        (cd "$here" && GOOS=wasip1 GOARCH=wasm nice -n 10 go build -mod=readonly \
            -buildmode=c-shared -trimpath -ldflags='-s -w' -o "$core.tmp" "./internal/testguests/$(basename "$dir")")
        mv "$core.tmp" "$core"
    fi
    cp "$core" "$out/$name.core.wasm"
    "$iar" componentize "$core" -o "$out/$name.wasm.tmp" >&2
    mv "$out/$name.wasm.tmp" "$out/$name.wasm"
    echo "$out/$name.wasm"
done
# Builds of other inputs unused for a week go.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$inputs" -mtime +7 -exec rm -rf {} +
