#!/usr/bin/env bash
# The long fault campaign (host/tests/all/faults.rs): SEEDS seeds of
# ROUNDS rounds each, over the real kube-apiserver, node agent, controller
# and versitygw; prints each round's line, then faults by kind, rounds by
# terminal phase, recovery times per fault kind (median, max) and the
# violations. A violation names its seed: `IAR_FAULT_SEEDS=<seed>` replays
# it. Usage: bash bench/faults.sh [FIRST_SEED] [SEEDS] [ROUNDS]; with
# IAR_FAULT_LOG=FILE the whole log is kept there; IAR_FAULT_PARALLEL
# seeds (3) run side by side, each with its own API server and store.
set -euo pipefail
cd "$(dirname "$0")/.."
first="${1:-1}" count="${2:-20}" rounds="${3:-10}"
seeds="$(seq -s, "$first" "$((first + count - 1))")"
IAR_KUBE_APISERVER="$(tools/kubernetes/build.sh kube-apiserver)"
export IAR_KUBE_APISERVER
log="$(mktemp)"
# The test binary and iar are built, then copied: what runs is the code of
# this moment, whatever is built beside it during a long run.
frozen="$(mktemp -d)"
trap 'cp "$log" "${IAR_FAULT_LOG:-/dev/null}" 2>/dev/null; rm -rf "$log" "$frozen"' EXIT
exe="$(cargo test -q -p iar --test all --no-run --message-format=json |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "all" and m.get("executable"):
        print(m["executable"])')"
cp "$exe" "$frozen/all"
# The `iar` the test binary was built beside (cargo builds it with it).
cp "$(dirname "$(dirname "$exe")")/iar" "$frozen/iar"
# Debug builds poll deep client stacks (kube, hyper, rustls) with large
# frames; two long runs (19, 20) ended with a tokio worker's 2 MiB stack
# overflowing in the harness. Threads get 32 MiB (tokio's workers follow
# RUST_MIN_STACK).
export RUST_MIN_STACK="${RUST_MIN_STACK:-33554432}"
start=$SECONDS
(cd host && IAR_TEST_BIN="$frozen/iar" IAR_FAULT_SEEDS="$seeds" IAR_FAULT_ROUNDS="$rounds" \
  IAR_FAULT_PARALLEL="${IAR_FAULT_PARALLEL:-3}" \
  "$frozen/all" seeded_faults --nocapture 2>&1) | tee "$log" |
  grep -E '^fault-campaign' || true
echo "took $((SECONDS - start)) s"
python3 - "$log" <<'PY'
import re, sys, statistics, collections
rounds = [l for l in open(sys.argv[1]) if re.match(r"fault-campaign seed=\d+ round=", l)]
kinds, phases, recover = collections.Counter(), collections.Counter(), collections.defaultdict(list)
for l in rounds:
    faults = re.search(r"faults=\[(.*?)\]", l).group(1)
    faults = [f.strip() for f in faults.split(",") if f.strip()]
    phase = re.search(r"phase=(\w+)", l).group(1)
    ms = int(re.search(r"recovery_ms=(\d+)", l).group(1))
    phases[phase] += 1
    for f in faults or ["(none)"]:
        kinds[f] += 1 if f != "(none)" else 0
        recover[f].append(ms)
print(f"rounds: {len(rounds)}, faults: {sum(kinds.values())}")
for k, n in sorted(kinds.items()):
    if n:
        r = recover[k]
        print(f"  {k:<22} {n:>5} injected; to a terminal phase: median {statistics.median(r)/1000:.1f} s, max {max(r)/1000:.1f} s")
print("phases:", dict(phases))
text = open(sys.argv[1]).read()
m = re.search(r"fault-campaign faults=\d+ violations=(\d+)", text)
print("violations:", m.group(1) if m else "the run did not finish")
for v in re.findall(r'"(seed \d+[^"]*)"', text):
    print("  ", v)
PY
