#!/usr/bin/env bash
# Issue 21's question: does a plugin that imports no WASI bring a fresh
# instance's call closer to a reused one's? Builds the labels plugin twice
# from the same source: as the SDK builds it (wasm32-wasip2; 21 imports,
# 19 of them WASI), and for wasm32-unknown-unknown (2 imports: the host's
# log and config) wrapped into a component by bench/no-wasi/componentize;
# then runs `examples/compare` on each, alternately, `ROUNDS` times (3),
# and prints the fresh, reused and instantiate rows and fresh ÷ reused.
# Run it with nothing else busy on the machine.
#
#   bash bench/no-wasi.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-unknown-unknown >/dev/null
cargo build --release -q -p iar --example compare
# Both builds get the SDK's 2 MiB initial memory (.cargo/config.toml).
RUSTFLAGS="-C link-arg=--initial-memory=2097152" cargo build -q --release \
  --target wasm32-unknown-unknown --manifest-path bench/no-wasi/labels/Cargo.toml
cargo build -q --release --manifest-path bench/no-wasi/componentize/Cargo.toml
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench/no-wasi/componentize/target/release/componentize \
  bench/no-wasi/labels/target/wasm32-unknown-unknown/release/labels_no_wasi.wasm \
  "$work/labels-no-wasi.wasm"
for round in $(seq "${ROUNDS:-3}"); do
  echo "round $round: wasm32-wasip2 (the SDK's build)"
  target/release/examples/compare --rounds 20 | grep -E "iar, (reused|fresh instance  )|instantiate \+|fresh ÷"
  echo "round $round: wasm32-unknown-unknown, no WASI"
  target/release/examples/compare --rounds 20 --plugin "$work/labels-no-wasi.wasm" |
    grep -E "iar, (reused|fresh instance  )|instantiate \+|fresh ÷"
done
