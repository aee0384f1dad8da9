#!/usr/bin/env bash
# Pod volume backups into a restic repository, iar against restic's own CLI
# (the same format iar writes) and kopia's (what Velero's node agent runs:
# Velero v1.18.3's fork, built by tools/kopia) on the same data and the
# same machine, one after the other:
#
#   small: FILES (default 5000) files of 4 KiB of noise in 50 directories
#   large: one file of LARGE_MIB (default 512) MiB of noise
#
# For each: the first backup (wall time, bytes the repository grew by), a
# second after 1 % of the small files changed (or 1 % of the large file
# rewritten in place), and a restore of the second. iar runs as a user
# does: `iar backup --volume-data --repository-password-file` (the volume
# is a pod's emptyDir in a manifest) and `iar volume restore`; restic as
# `restic backup` and `restic restore`; kopia as `kopia snapshot create` and
# `kopia snapshot restore` on a filesystem repository with kopia's default
# policy and its automatic maintenance off (Velero runs maintenance as a
# job of its own, iar on the leader's schedule). Everything lives on a tmpfs
# (/dev/shm), so the figures are the tools', not the disk's.
#
#   bash bench/repository.sh            # builds iar (release), restic, kopia
#   IAR=path/to/iar RESTIC=path/to/restic KOPIA=path/to/kopia bash bench/repository.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
files="${FILES:-5000}"
large_mib="${LARGE_MIB:-512}"
if [ -z "${IAR:-}" ]; then
  echo "== building iar (release)" >&2
  cargo build --release -q -p iar --bin iar --manifest-path "$root/Cargo.toml"
  IAR="${CARGO_TARGET_DIR:-$root/target}/release/iar"
fi
RESTIC="${RESTIC:-$(bash "$root/tools/restic/build.sh")}"
KOPIA="${KOPIA:-$(bash "$root/tools/kopia/build.sh")}"
base="$(mktemp -d -p "${BENCH_TMPDIR:-/dev/shm}")"
trap 'rm -rf "$base"' EXIT
echo "bench password" > "$base/password"
export RESTIC_PASSWORD_FILE="$base/password"
export KOPIA_PASSWORD="bench password" KOPIA_CHECK_FOR_UPDATES=false

noise() { head -c "$1" /dev/urandom; }
now() { date +%s.%N; }
bytes() { du -sb "$1" | cut -f1; }

make_data() { # KIND DIR
  mkdir -p "$2"
  if [ "$1" = small ]; then
    for d in $(seq 0 49); do
      mkdir -p "$2/d$d"
      for f in $(seq 0 $((files / 50 - 1))); do noise 4096 > "$2/d$d/f$f"; done
    done
  else
    noise $((large_mib << 20)) > "$2/big"
  fi
}

change_one_percent() { # KIND DIR
  if [ "$1" = small ]; then
    local n=$((files / 100)) i=0
    for d in $(seq 0 49); do
      for f in $(seq 0 $((n / 50 > 0 ? n / 50 - 1 : 0))); do
        if [ $i -lt $n ]; then noise 4096 > "$2/d$d/f$f"; i=$((i + 1)); fi
      done
    done
  else
    noise $(((large_mib << 20) / 100)) |
      dd of="$2/big" bs=1M seek=$((large_mib / 2)) conv=notrunc status=none
  fi
}

run_iar() { # KIND -> "first_s first_bytes second_s second_bytes restore_s"
  local w="$base/iar-$1"
  local vol="$w/data/bench/.pods/writer/scratch"
  mkdir -p "$w/items" "$w/plugins"
  cp "$root/bench/volume-pod.yaml" "$w/items/pod.yaml"
  make_data "$1" "$vol"
  local t0 t1 t2 t3 t4 b1 b2
  local common=(--items "$w/items" --plugins "$w/plugins" --store "$w/store"
    --volume-data "$w/data" --repository-password-file "$base/password")
  t0=$(now); "$IAR" backup first "${common[@]}" >/dev/null 2>&1; t1=$(now)
  b1=$(bytes "$w/store/restic")
  change_one_percent "$1" "$vol"
  t2=$(now); "$IAR" backup second "${common[@]}" >/dev/null 2>&1; t3=$(now)
  b2=$(($(bytes "$w/store/restic") - b1))
  "$IAR" volume restore second bench/writer/scratch --to "$w/restored" --store "$w/store" \
    --repository-password-file "$base/password" >/dev/null
  t4=$(now)
  diff -r "$vol" "$w/restored" >/dev/null || { echo "iar: the restore differs" >&2; exit 1; }
  echo "$(echo "$t1 - $t0" | bc) $b1 $(echo "$t3 - $t2" | bc) $b2 $(echo "$t4 - $t3" | bc)"
  rm -rf "$w"
}

run_restic() { # KIND
  local w="$base/restic-$1"
  local vol="$w/data/volume"
  make_data "$1" "$vol"
  "$RESTIC" --repo "$w/repo" init >/dev/null
  local t0 t1 t2 t3 t4 b1 b2
  t0=$(now); (cd "$w/data" && "$RESTIC" --repo "$w/repo" backup --host iar volume >/dev/null); t1=$(now)
  b1=$(bytes "$w/repo")
  change_one_percent "$1" "$vol"
  t2=$(now); (cd "$w/data" && "$RESTIC" --repo "$w/repo" backup --host iar volume >/dev/null); t3=$(now)
  b2=$(($(bytes "$w/repo") - b1))
  "$RESTIC" --repo "$w/repo" restore latest --target "$w/restored" >/dev/null
  t4=$(now)
  diff -r "$vol" "$w/restored/volume" >/dev/null || { echo "restic: the restore differs" >&2; exit 1; }
  echo "$(echo "$t1 - $t0" | bc) $b1 $(echo "$t3 - $t2" | bc) $b2 $(echo "$t4 - $t3" | bc)"
  rm -rf "$w"
}

run_kopia() { # KIND
  local w="$base/kopia-$1"
  local vol="$w/data/volume"
  local k=("$KOPIA" --config-file "$w/config")
  export KOPIA_CACHE_DIRECTORY="$w/cache" KOPIA_LOG_DIR="$w/logs"
  make_data "$1" "$vol"
  "${k[@]}" repository create filesystem --path "$w/repo" >/dev/null 2>&1
  "${k[@]}" maintenance set --enable-quick=false --enable-full=false >/dev/null 2>&1
  local t0 t1 t2 t3 t4 b1 b2 id
  t0=$(now); "${k[@]}" snapshot create --no-progress "$vol" >/dev/null 2>&1; t1=$(now)
  b1=$(bytes "$w/repo")
  change_one_percent "$1" "$vol"
  t2=$(now); "${k[@]}" snapshot create --no-progress "$vol" >/dev/null 2>&1; t3=$(now)
  b2=$(($(bytes "$w/repo") - b1))
  id=$("${k[@]}" snapshot list "$vol" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)[-1]["id"])')
  t3=$(now)
  "${k[@]}" snapshot restore "$id" "$w/restored" >/dev/null 2>&1
  t4=$(now)
  diff -r "$vol" "$w/restored" >/dev/null || { echo "kopia: the restore differs" >&2; exit 1; }
  echo "$(echo "$t1 - $t0" | bc) $b1 $(echo "$t3 - $t2" | bc) $b2 $(echo "$t4 - $t3" | bc)"
  rm -rf "$w"
}

echo "date: $(date -u +%FT%TZ); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "small: $files files of 4 KiB; large: one file of $large_mib MiB; $("$RESTIC" version | cut -d' ' -f1-2); kopia $("$KOPIA" --version | cut -d' ' -f1)"
printf '%-6s %-7s %9s %12s %9s %12s %12s %9s\n' data tool first_s first_bytes second_s second_bytes second_share restore_s
for kind in small large; do
  [ "$kind" = small ] && size=$((files * 4096)) || size=$((large_mib << 20))
  for tool in iar restic kopia; do
    read -r f fb s sb r < <("run_$tool" "$kind")
    printf '%-6s %-7s %9.2f %12d %9.2f %12d %11.2f%% %9.2f\n' "$kind" "$tool" "$f" "$fb" "$s" "$sb" \
      "$(echo "scale=4; 100 * $sb / $size" | bc)" "$r"
    eval "${tool}_${kind}=$f"
    [ "$kind" = large ] && eval "${tool}_restore=$r"
  done
done
# shellcheck disable=SC2154
ratio() { echo "scale=2; $1 / $2" | bc; }
for base_tool in restic kopia; do
  b_small="${base_tool}_small" b_large="${base_tool}_large" r_large="${base_tool}_restore"
  echo "iar / $base_tool: first backup small $(ratio "$iar_small" "${!b_small}")x" \
    "($(echo "scale=0; $files / $iar_small" | bc) files/s against $(echo "scale=0; $files / ${!b_small}" | bc))," \
    "large $(ratio "$iar_large" "${!b_large}")x; large restore $(ratio "$iar_restore" "${!r_large}")x"
done
