#!/usr/bin/env bash
# The embedded default: back up the example application in examples/cluster
# through the three example plugins, into a fresh local store, with the web
# pod's volume backed up between its pre and post hooks and its claim
# snapshotted by pvc-snapshot (the snapshot controller played below), then
# describe it and restore it (objects as manifests, the volume's files).
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null
cargo plugins --quiet
cargo build --release --quiet
work="$(mktemp -d)"
mkdir "$work/plugins"
cp target/wasm32-wasip2/guest/iar_plugin_{labels,pod_volumes,pvc_snapshot}.wasm "$work/plugins/"
store="$work/iar-store"
# pvc-snapshot creates the claim's VolumeSnapshot (contract 1.2.0) and
# labels the claim with it: the operator grants it that write and that
# item change, and nothing else.
cat > "$work/plugins/iar_plugin_pvc_snapshot.yaml" <<'YAML'
allowWrite: [volumesnapshots.snapshot.storage.k8s.io]
allowMutate: [persistentvolumeclaims]
YAML
# labels changes the items it labels: an item change on every resource
# (what decides rights, such as ServiceAccounts, stays refused).
cat > "$work/plugins/iar_plugin_labels.yaml" <<'YAML'
allowMutate: ["*"]
YAML
# Without a cluster, objects plugins create go to the store's
# plugins/iar/cluster-overlay/ (the prefix Velero keeps for plugins), one
# file each. No snapshot controller runs here, so this
# plays it: once the plugin's snapshot exists, a second later, it binds it
# to a new content and marks it ready, by editing the two files.
overlay="$store/plugins/iar/cluster-overlay/volumesnapshots.snapshot.storage.k8s.io/shop"
(
  for _ in $(seq 1200); do
    snapshot="$(ls "$overlay"/data-web-0-*.yaml 2>/dev/null | head -n1 || true)"
    if [ -n "$snapshot" ]; then
      sleep 1
      name="$(basename "$snapshot" .yaml)"
      contents="$store/plugins/iar/cluster-overlay/volumesnapshotcontents.snapshot.storage.k8s.io/_cluster"
      mkdir -p "$contents"
      cat > "$contents/.snapcontent-$name.tmp" <<YAML
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotContent
metadata: {name: snapcontent-$name}
spec:
  deletionPolicy: Retain
  driver: hostpath.csi.k8s.io
  source: {volumeHandle: 6a1f0c3e}
  volumeSnapshotClassName: csi-snapclass
  volumeSnapshotRef: {apiVersion: snapshot.storage.k8s.io/v1, kind: VolumeSnapshot, name: $name, namespace: shop}
status: {readyToUse: true, restoreSize: 1073741824, snapshotHandle: snap-$name}
YAML
      mv "$contents/.snapcontent-$name.tmp" "$contents/snapcontent-$name.yaml"
      { cat "$snapshot"
        printf 'status: {readyToUse: true, boundVolumeSnapshotContentName: snapcontent-%s, restoreSize: 1Gi, creationTime: "%s"}\n' \
          "$name" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      } > "$overlay/.$name.tmp"
      mv "$overlay/.$name.tmp" "$snapshot"
      exit 0
    fi
    sleep 0.1
  done
) &
# The pod's volume data (one directory per namespace/pvc); the hooks write
# into this copy.
cp -R examples/volume-data "$work/volume-data"
./target/release/iar backup demo --items examples/cluster --plugins "$work/plugins" \
  --store "$store" --config iar_plugin_labels:labels=backed-up-by=iar \
  --volume-data "$work/volume-data" --exec-hooks-locally --sync-period 2s
./target/release/iar describe demo --store "$store"
# And back: the backup's objects restored as iar's restore runs Velero's
# (order, resets, built-in actions, labels; the labels plugin's restore
# action), into namespace shop-restored as manifests (`--cluster` restores
# into the cluster the environment reaches), and the web pod's volume
# files into a directory.
./target/release/iar restore demo-back --from-backup demo --store "$store" \
  --plugins "$work/plugins" --namespace-mappings shop:shop-restored --to "$work/restored"
./target/release/iar volume restore demo shop/web-0/html --store "$store" --to "$work/restored-html"
echo "store: $store  (iar get --store $store)"
echo "restored: $work/restored (manifests), $work/restored-html (the html volume's files)"
