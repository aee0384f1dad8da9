#!/usr/bin/env bash
# Builds the Go SDK's example plugins (examples/*) and the test suite's
# hostile Go guests (internal/testguests/*) into OUT_DIR as components and
# prints the path of each, one per line (their core modules beside them,
# NAME.core.wasm).
#
#   go-sdk/build.sh OUT_DIR        (IAR=path/to/iar, default: iar on PATH)
#
# Each is `go build` to a wasip1 reactor (the core module) and then
# `iar componentize`. Core modules are cached by the hash of their inputs
# (every .go file and go.mod of the SDK, this script, the Go version)
# under ${XDG_CACHE_HOME:-$HOME/.cache}/iar/go-sdk; componentizing is
# redone on every run (well under a second) so that a changed iar is used.
# Only the Go toolchain is needed: the SDK has no module dependencies.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/iar/go-sdk
mkdir -p "$cache"
iar=${IAR:-iar}

log() { echo "go-sdk/build.sh: $*" >&2; }

command -v go >/dev/null || { log "go not found: install Go >= 1.24"; exit 1; }

# Serialises concurrent runs on one cache.
exec 9>"$cache/.lock"
flock 9

# Stripped (-s -w): the symbol table and DWARF are a third of the module,
# and a panic's stack names functions without them.
GOFLAGS_BUILD=(-buildmode=c-shared -trimpath -ldflags=-s\ -w)

inputs=$(cd "$here" && { find . -name '*.go' -o -name go.mod | sort | xargs cat; cat build.sh; go version; } | sha256sum | cut -d' ' -f1)

for pkg in examples/labels examples/pvc-snapshot examples/config-block internal/testguests/spin internal/testguests/panic internal/testguests/heap internal/testguests/catalog; do
    name=$(basename "$pkg")
    case $pkg in internal/testguests/*) name=go-$name ;; *) name=$name-go ;; esac
    core=$cache/$inputs/$name.core.wasm
    if [ ! -f "$core" ]; then
        log "go build $pkg"
        mkdir -p "$cache/$inputs"
        (cd "$here" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local \
            go build "${GOFLAGS_BUILD[@]}" -o "$core.tmp" "./$pkg")
        mv "$core.tmp" "$core"
    fi
    cp "$core" "$out/$name.core.wasm"
    "$iar" componentize "$core" -o "$out/$name.wasm.tmp" >&2
    mv "$out/$name.wasm.tmp" "$out/$name.wasm"
    echo "$out/$name.wasm"
done
