#!/usr/bin/env bash
# Prints the example plugin ConfigMap (the labels plugin, labelling every
# backed-up object `backed-up-by=iar`), ready for
#   bash deploy/example-plugin.sh | kubectl apply --server-side -f -
# Generated rather than committed: the component's bytes and digest are
# those of this checkout's build.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo plugins >&2
settings="$(mktemp)"
trap 'rm -f "$settings"' EXIT
printf 'config:\n  labels: backed-up-by=iar\nlimits:\n  deadline: 2s\n' > "$settings"
cargo run -q -p iar -- plugin configmap target/wasm32-wasip2/guest/iar_plugin_labels.wasm \
  --name labels --namespace iar-system --settings "$settings"
