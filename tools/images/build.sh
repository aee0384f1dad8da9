#!/usr/bin/env bash
# Builds iar's two images from nothing, once per machine per input: a
# statically linked `iar` (x86_64-unknown-linux-musl), the example plugins,
# then deploy/Dockerfile (iar:VERSION) and deploy/velero/Dockerfile
# (iar-velero-plugin:VERSION), both `FROM scratch`, so no image registry is
# needed. Each image is saved as a docker-archive tar, which `docker load`,
# `podman load` and containerd's `ctr -n k8s.io images import` all take.
#
#   build.sh    build (if not cached) and print the two tars' paths:
#                 .../iar/images/KEY/iar.tar
#                 .../iar/images/KEY/iar-velero-plugin.tar
#               (the static binary is .../iar/images/KEY/context/iar)
#
# IAR_IMAGE_PROFILE names the cargo profile of the static iar: `release`
# (the default: what a user ships) or `image-test` (the test suite's: the
# same sources and Dockerfiles, opt-level 1, a fraction of the release
# build's time on a fresh machine; docs/decisions.md, "The test images'
# profile").
#
# KEY is a hash of the inputs' contents, not of the commit: every file under
# host/ crates/ guest-sdk/ plugins/ wit/ deploy/ tools/images/, the workspace's
# Cargo.toml, Cargo.lock and .cargo/config.toml as they are in the working
# tree (tracked or not, .gitignore respected), plus `rustc -vV` and the CA
# bundle. A commit that changes none of them reuses the images; an edit
# builds new ones. Only the paths go to stdout; progress and timings go to
# stderr. podman and runc (and musl-tools, for the C in ring, wasmtime and
# mimalloc) are installed from Debian when missing; podman runs with a
# private containers.conf (CONTAINERS_CONF) and a throwaway storage, so
# the host's container configuration and images are left as they were.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
log() { echo "images build: $*" >&2; }
target=x86_64-unknown-linux-musl
profile="${IAR_IMAGE_PROFILE:-release}"
case "$profile" in
  release | image-test) ;;
  *) log "IAR_IMAGE_PROFILE=$profile: expected release or image-test"; exit 1 ;;
esac

cache="${XDG_CACHE_HOME:-$HOME/.cache}/iar/images"
mkdir -p "$cache"
# The musl build keeps its own target dir (a glibc one has nothing to
# share with it), reused across keys: an edit rebuilds only iar's crates.
export CARGO_TARGET_DIR="$cache/target"

inputs=(host crates guest-sdk plugins wit deploy tools/images Cargo.toml Cargo.lock .cargo/config.toml)
# The image's TLS roots: the cloud stores' clients trust the system's CA
# bundle (rustls-native-certs), and `FROM scratch` has none.
ca_bundle="${IAR_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

apt_install() {
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  command -v apt-get >/dev/null || { log "missing $*, and there is no apt-get"; exit 1; }
  local started=$SECONDS
  log "installing $* with apt-get"
  # Another apt may hold the lock for a while (other builds on the machine).
  apt_get() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
  apt_get install -y -qq --no-install-recommends "$@" >&2 ||
    { apt_get update -qq >&2 && apt_get install -y -qq --no-install-recommends "$@" >&2; } ||
    { log "could not install $*"; exit 1; }
  log "installed in $((SECONDS - started)) s"
}

command -v cargo >/dev/null && command -v rustup >/dev/null ||
  { log "needs Rust through rustup (https://rustup.rs), for the $target target"; exit 1; }
[[ -r "$ca_bundle" ]] || apt_install ca-certificates
[[ -r "$ca_bundle" ]] || { log "no CA bundle at $ca_bundle (set IAR_CA_BUNDLE)"; exit 1; }

# The key: path and blob hash of every input file as it is on disk.
key="$(
  cd "$root"
  if git rev-parse --git-dir >/dev/null 2>&1; then
    git -c core.quotePath=false ls-files --cached --others --exclude-standard -- "${inputs[@]}" | sort -u |
      while IFS= read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done >"$cache/.files.$$"
    paste "$cache/.files.$$" <(git hash-object --stdin-paths <"$cache/.files.$$")
    rm -f "$cache/.files.$$"
  else
    find "${inputs[@]}" -type f -not -path '*/target/*' -print0 | sort -z | xargs -0 sha256sum
  fi
  rustc -vV
  sha256sum <"$ca_bundle"
  echo "profile $profile"
)"
key="$(sha256sum <<<"$key" | cut -c1-16)"
out="$cache/$key"

if [[ -f "$out/iar.tar" && -f "$out/iar-velero-plugin.tar" ]]; then
  echo "$out/iar.tar"
  echo "$out/iar-velero-plugin.tar"
  exit 0
fi

# One build at a time per machine: parallel test binaries or CI jobs wait
# for the first build and then reuse it.
exec 9>"$cache/.lock"
flock 9
if [[ ! -f "$out/iar.tar" || ! -f "$out/iar-velero-plugin.tar" ]]; then
  total=$SECONDS
  installed="$(rustup target list --installed)"
  for t in "$target" wasm32-wasip2; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t" >&2
  done
  # ring, wasmtime and mimalloc compile C with the target's C compiler.
  command -v musl-gcc >/dev/null || command -v x86_64-linux-musl-gcc >/dev/null || apt_install musl-tools
  missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  [[ ${#missing[@]} -eq 0 ]] || apt_install "${missing[@]}"

  started=$SECONDS
  log "building iar ($profile) for $target and the example plugins in $CARGO_TARGET_DIR (about 15 minutes the first time on 2 cores for release)"
  # nice: other builds share this machine's cores.
  (cd "$root" && nice -n 10 cargo build -q --profile "$profile" --locked -p iar --target "$target" >&2)
  # The two plugins the images carry.
  (cd "$root" && nice -n 10 cargo build -q --locked --target wasm32-wasip2 --profile guest \
    -p iar-plugin-labels -p iar-plugin-pvc-snapshot >&2)
  log "built in $((SECONDS - started)) s"

  bin="$CARGO_TARGET_DIR/$target/$profile/iar"
  guest="$CARGO_TARGET_DIR/wasm32-wasip2/guest"
  # A static binary has no program interpreter; anything else would not
  # start in a `FROM scratch` image.
  if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
    log "$bin is dynamically linked"; exit 1
  fi
  version="$("$bin" --version | awk '{print $2}')"

  # The build context both Dockerfiles expect (see their first lines).
  rm -rf "$out"
  mkdir -p "$out/context/iar-plugins"
  ctx="$out/context"
  # Without the release profile's line tables (209 of its 268 MB); the
  # symbols stay, so a panic's backtrace still names its functions.
  strip --strip-debug -o "$ctx/iar" "$bin"
  cp "$ca_bundle" "$ctx/ca-certificates.crt"
  cp "$guest/iar_plugin_labels.wasm" "$ctx/iar-plugins/labels.wasm"
  cp "$guest/iar_plugin_pvc_snapshot.wasm" "$ctx/iar-plugins/pvc-snapshot.wasm"
  cp "$root/deploy/velero/pvc-snapshot.yaml" "$ctx/iar-plugins/pvc-snapshot.yaml"
  chmod 0755 "$ctx/iar"
  chmod 0644 "$ctx/ca-certificates.crt" "$ctx/iar-plugins"/*

  # What these machines need (../shared/REFERENCES.md): crun refuses hybrid
  # cgroups, and runc cannot raise rlimits without CAP_SYS_RESOURCE. With
  # CONTAINERS_CONF set, podman reads this file instead of /etc/containers'.
  cat >"$cache/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
EOF
  cat >"$cache/policy.json" <<'EOF'
{"default": [{"type": "insecureAcceptAnything"}]}
EOF
  export CONTAINERS_CONF="$cache/containers.conf"
  # A storage of its own, removed at the end: the tars are the product.
  store="$(mktemp -d "$cache/.storage.XXXXXX")"
  # podman refuses a runroot path over 50 characters (a cache under a long
  # $HOME or XDG_CACHE_HOME has one): its runtime state goes to a short
  # directory of its own.
  runroot="$(mktemp -d /tmp/iar-podman.XXXXXX)"
  pm() {
    podman --root "$store/root" --runroot "$runroot" --tmpdir "$store/tmp" \
      --storage-driver vfs "$@"
  }
  trap 'pm rm -a -f >/dev/null 2>&1 || true; rm -rf "$store" "$runroot"' EXIT

  started=$SECONDS
  build() { # IMAGE DOCKERFILE
    pm build -q --pull=never --signature-policy "$cache/policy.json" \
      -f "$root/$2" -t "$1" "$ctx" >&2
  }
  # The names deploy/*.yaml and `velero plugin add` give, in full: what
  # `iar:0.1.0` means to Docker, containerd and the kubelet.
  iar="docker.io/library/iar:$version"
  velero="docker.io/library/iar-velero-plugin:$version"
  build "$iar" deploy/Dockerfile
  build "$velero" deploy/velero/Dockerfile
  # Both start in a container (as user 65532, no network, no shell); the
  # Velero one as `velero plugin add` runs it, an init container with
  # Velero's plugin directory (an emptyDir, 0777) at /target.
  pm run --rm --network none "$iar" --version >&2
  plugin_dir="$store/target"
  mkdir -m 0777 "$plugin_dir"
  pm run --rm --network none -v "$plugin_dir:/target" "$velero" >&2
  for f in iar iar-plugins/labels.wasm iar-plugins/pvc-snapshot.wasm iar-plugins/pvc-snapshot.yaml; do
    [[ -f "$plugin_dir/$f" ]] || { log "the Velero image's entrypoint did not install $f"; exit 1; }
  done
  pm save -q --format docker-archive -o "$out/iar.tar.tmp" "$iar"
  pm save -q --format docker-archive -o "$out/iar-velero-plugin.tar.tmp" "$velero"
  mv "$out/iar.tar.tmp" "$out/iar.tar"
  mv "$out/iar-velero-plugin.tar.tmp" "$out/iar-velero-plugin.tar"
  log "images built and saved in $((SECONDS - started)) s: iar:$version $(du -h "$out/iar.tar" | cut -f1), iar-velero-plugin:$version $(du -h "$out/iar-velero-plugin.tar" | cut -f1); $((SECONDS - total)) s in all"

  # Keep the three newest builds.
  ls -1dt "$cache"/????????????????/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
fi
echo "$out/iar.tar"
echo "$out/iar-velero-plugin.tar"
