#!/usr/bin/env bash
# Builds the CSI snapshot-controller
# (github.com/kubernetes-csi/external-snapshotter/v8, v8.7.0), once per
# machine: the controller that binds iar's test VolumeSnapshots to their
# VolumeSnapshotContents against the real kube-apiserver. No CSI driver runs
# in the tests, so nothing cuts snapshots; the controller does the API side.
#
# Pinned by go.mod and go.sum here. client/v8 is pinned at v8.7.0 too: the
# v8.7.0 go.mod asks for client v8.6.0 and builds against its own ./client
# by a replace, which Go ignores in a dependency.
# The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/snapshot-controller-<hash of go.mod>/snapshot-controller
# and is reused while it exists. Next to it: `crds.yaml`, the three
# snapshot.storage.k8s.io CRDs (VolumeSnapshotClass, VolumeSnapshotContent,
# VolumeSnapshot; v1 served and stored) from client/v8's config/crd. Only
# the binary's path goes to stdout; progress goes to stderr.
# Cold (empty Go build cache, modules downloaded), on 2 cores: 433 s, while a
# kube-apiserver build and cargo shared them (460 s of CPU: ~4 min if idle).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "snapshot-controller build: $*" >&2; }

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0

key="$(sha256sum <"$here/go.mod" | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/snapshot-controller-$key"
if [[ -x "$out/snapshot-controller" && -s "$out/crds.yaml" ]]; then
  echo "$out/snapshot-controller"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$out"
# One build at a time per machine; the others wait and reuse it.
exec 9>"$out/.lock"
flock 9
if [[ ! -x "$out/snapshot-controller" ]]; then
  started=$SECONDS
  (cd "$here" && go mod download)
  log "building snapshot-controller"
  (cd "$here" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/snapshot-controller.tmp" \
    github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller)
  mv "$out/snapshot-controller.tmp" "$out/snapshot-controller"
  log "built snapshot-controller in $((SECONDS - started)) s"
fi
client="$(cd "$here" && go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)"
{
  for kind in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
    echo "---"
    # Each file opens with its own `---`: one separator per CRD is enough.
    sed '1{/^---$/d}' "$client/config/crd/snapshot.storage.k8s.io_$kind.yaml"
  done
} >"$out/crds.yaml.tmp"
mv "$out/crds.yaml.tmp" "$out/crds.yaml"
echo "$out/snapshot-controller"
