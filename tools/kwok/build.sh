#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok, v0.8.0), once per machine: the kubelet
# stand-in of iar's cluster tests. It plays nodes and pods against the real
# kube-apiserver and serves the kubelet API, whose exec runs a local command
# that a kwok `Exec` resource names.
#
# Pinned by go.mod and go.sum here. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/kwok-<hash of go.mod>/kwok and is reused
# while it exists. Next to it, from the same module: `stages.yaml` (kwok's
# "fast" node and pod stages: the binary has none built in, kwokctl embeds
# them) and `execs.crd.yaml` (the CRD of its namespaced Exec resource). Only
# the binary's path goes to stdout; progress goes to stderr.
# Cold (empty Go build cache, modules downloaded), on 2 cores: 130 s.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "kwok build: $*" >&2; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(sha256sum <"$here/go.mod" | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/kwok-$key"
if [[ -x "$out/kwok" && -s "$out/stages.yaml" && -s "$out/execs.crd.yaml" ]]; then
  echo "$out/kwok"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$out/kwok" ]]; then
  started=$SECONDS
  (cd "$here" && go mod download)
  log "building kwok"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok)
  mv "$out/kwok.tmp" "$out/kwok"
  log "built kwok in $((SECONDS - started)) s"
fi
module="$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
{
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$module/kustomize/stage/$f"
  done
} >"$out/stages.yaml.tmp"
mv "$out/stages.yaml.tmp" "$out/stages.yaml"
cp "$module/kustomize/crd/bases/kwok.x-k8s.io_execs.yaml" "$out/execs.crd.yaml.tmp"
mv "$out/execs.crd.yaml.tmp" "$out/execs.crd.yaml"
echo "$out/kwok"
