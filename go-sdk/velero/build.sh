#!/usr/bin/env bash
# Builds Velero's own built-in backup and restore item actions (pkg/backup/actions
# and pkg/restore/actions of
# the Velero version examples/velero-builtins/go.mod names, v1.18.3),
# fetched from the Go module proxy and compiled unchanged, from the one
# main package examples/velero-builtins, twice:
#
#   OUT_DIR/velero-builtins.wasm    an iar component (GOOS=wasip1 reactor,
#                                    then `iar componentize`; its core module
#                                    beside it, velero-builtins.core.wasm)
#   OUT_DIR/velero-builtins-native  the same actions natively, called through
#                                    Velero's own plugin gRPC server and client
#                                    (examples/velero-builtins/native.go)
#   OUT_DIR/velero-pod.wasm         Velero's backup PodAction alone
#                                    (examples/velero-builtins/pod): what a
#                                    component of one action costs
#
#   go-sdk/velero/build.sh OUT_DIR        (IAR=path/to/iar, default: iar on PATH)
#
# and prints those three paths, one per line.
#
# Velero's package pkg/restore/actions does not compile for wasip1 as it
# is: one file of it, pod_volume_restore_action.go, reaches kopia and the
# Azure SDK, which have no wasip1 build. Go refuses an -overlay of a file
# in the module cache, so the build uses Velero's module from a copy: the
# module cache's tree of that version (fetched through the proxy,
# checked against go.sum) without that file and its test, made here at
# build time under the cache and never committed, and a `replace` of
# Velero's module to that copy in a go.mod generated beside it (-modfile).
# Every other file of Velero's module is the module's own, unchanged; the
# native program is built from the same copy, so both run the same code.
#
# Modules come through the Go module proxy the environment names
# (GOPROXY, as tools/velero/build.sh): GOFLAGS gains -mod=mod, so the
# generated go.mod may gain what the build needs.
#
# Builds are cached by the hash of their inputs (every .go, go.mod and
# go.sum of go-sdk/, this script, the Go version) under
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/go-sdk-velero (those unused for a
# week are removed); componentizing is redone on every run so that a
# changed iar is used.
#
#   go-sdk/velero/build.sh --tidy
#
# rewrites examples/velero-builtins/go.mod and go.sum as `go mod tidy`
# makes them against the copy (after changing Velero's version there).
set -euo pipefail

usage() {
    echo "usage: $0 OUT_DIR | --tidy" >&2
    exit 2
}
[ $# -eq 1 ] || usage

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sdk=$(cd "$here/.." && pwd)
example=$here/examples/velero-builtins
cache=${XDG_CACHE_HOME:-$HOME/.cache}/iar/go-sdk-velero
mkdir -p "$cache"
iar=${IAR:-iar}
tidy=false
case $1 in
    --tidy) tidy=true ;;
    -*) usage ;;
    *)
        mkdir -p "$1"
        out=$(cd "$1" && pwd)
        ;;
esac

log() { echo "go-sdk/velero/build.sh: $*" >&2; }

command -v go >/dev/null || { log "go not found: install Go >= 1.26"; exit 1; }
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=mod"

# Serialises concurrent runs on one cache.
exec 9>"$cache/.lock"
flock 9

velero=github.com/vmware-tanzu/velero
# The files of Velero's module the copy leaves out: the one file of
# pkg/restore/actions that cannot target wasip1, and its test.
dropped=(pkg/restore/actions/pod_volume_restore_action.go pkg/restore/actions/pod_volume_restore_action_test.go)

inputs=$(cd "$sdk" && { find . \( -name '*.go' -o -name go.mod -o -name go.sum \) -print | sort | xargs cat; cat "$here/build.sh"; go version; } | sha256sum | cut -d' ' -f1)
dir=$cache/$inputs
work=$(mktemp -d "$cache/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The generated go.mod and go.sum: the committed ones, then the replace.
gen=$work/velero-builtins.mod
cp "$example/go.mod" "$gen"
cp "$example/go.sum" "$work/velero-builtins.sum"

# Velero's module as the proxy serves it, verified against go.sum.
(cd "$example" && go mod download -modfile="$gen" "$velero")
read -r version src < <(cd "$example" && go list -modfile="$gen" -m -f '{{.Version}} {{.Dir}}' "$velero")
copy=$cache/velero-$version-for-wasip1
if [ ! -d "$copy" ]; then
    log "copying $velero@$version from the module cache without ${dropped[*]}"
    rm -rf "$copy.tmp"
    cp -R "$src" "$copy.tmp"
    chmod -R u+w "$copy.tmp"
    for f in "${dropped[@]}"; do
        [ -f "$copy.tmp/$f" ] || { log "$velero@$version has no $f: update this script"; exit 1; }
        rm "$copy.tmp/$f"
    done
    mv "$copy.tmp" "$copy"
fi
go mod edit -replace="$velero=$copy" "$gen"

if $tidy; then
    (cd "$example" && go mod tidy -modfile="$gen")
    go mod edit -dropreplace="$velero" "$gen"
    cp "$gen" "$example/go.mod"
    cp "$work/velero-builtins.sum" "$example/go.sum"
    # go.sum keeps the checksum of Velero's module itself, which the
    # replaced build does not need but the download above checks.
    (cd "$example" && go mod download "$velero@$version")
    log "wrote $example/go.mod and go.sum"
    exit 0
fi

core=$dir/velero-builtins.core.wasm
pod_core=$dir/velero-pod.core.wasm
native=$dir/velero-builtins-native
mkdir -p "$dir"
# Stripped (-s -w) as go-sdk/build.sh's plugins.
wasip1_build() { # OUT PACKAGE
    (cd "$example" && GOOS=wasip1 GOARCH=wasm nice -n 10 \
        go build -modfile="$gen" -buildmode=c-shared -trimpath -ldflags='-s -w' -o "$1.tmp" "$2")
    mv "$1.tmp" "$1"
}
if [ ! -f "$core" ]; then
    log "go build (GOOS=wasip1) examples/velero-builtins (minutes the first time)"
    started=$SECONDS
    wasip1_build "$core" .
    log "built $(basename "$core") ($(stat -c %s "$core") bytes) in $((SECONDS - started)) s"
fi
# Velero's PodAction alone (examples/velero-builtins/pod): what a
# component of one action costs (the packages are built by now: a link).
if [ ! -f "$pod_core" ]; then
    started=$SECONDS
    wasip1_build "$pod_core" ./pod
    log "built $(basename "$pod_core") ($(stat -c %s "$pod_core") bytes) in $((SECONDS - started)) s"
fi
if [ ! -f "$native" ]; then
    log "go build (native) examples/velero-builtins"
    started=$SECONDS
    (cd "$example" && nice -n 10 go build -modfile="$gen" -trimpath -ldflags='-s -w' -o "$native.tmp" .)
    mv "$native.tmp" "$native"
    log "built $(basename "$native") in $((SECONDS - started)) s"
fi

# Builds of other inputs are 135 MB each: those unused for a week go.
touch "$dir"
find "$cache" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
    -regex '.*/[0-9a-f]{64}' ! -name "$inputs" -mtime +7 -exec rm -rf {} +

cp "$core" "$out/velero-builtins.core.wasm"
started=$SECONDS
"$iar" componentize "$core" -o "$out/velero-builtins.wasm.tmp" >&2
mv "$out/velero-builtins.wasm.tmp" "$out/velero-builtins.wasm"
log "componentized in $((SECONDS - started)) s ($(stat -c %s "$out/velero-builtins.wasm") bytes)"
"$iar" componentize "$pod_core" -o "$out/velero-pod.wasm.tmp" >&2
mv "$out/velero-pod.wasm.tmp" "$out/velero-pod.wasm"
cp "$native" "$out/velero-builtins-native.tmp"
mv "$out/velero-builtins-native.tmp" "$out/velero-builtins-native"
echo "$out/velero-builtins.wasm"
echo "$out/velero-builtins-native"
echo "$out/velero-pod.wasm"
