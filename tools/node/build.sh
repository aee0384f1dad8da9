#!/usr/bin/env bash
# Prepares what the tests' real node (tests/apiserver/src/node.rs) runs
# besides the kubelet, once per machine, and prints the path of the pause
# binary; everything else lies next to it:
#
#   pause          kubelet's pause, `gcc -Os -static` of build/pause/linux/pause.c
#                  from the k8s.io/kubernetes module tools/kubernetes pins
#   pause.tar      a FROM-scratch image of it, iar.test/pause:3.10
#   busybox.tar    a FROM-scratch image of Debian's static busybox with a link
#                  per applet in /bin, iar.test/busybox:1 (so pods can `sh -c`)
#
# The images are docker-archive tars (`docker save`'s format: manifest.json,
# the config, one layer tar) written here with tar and sha256sum: no
# registry is reachable, nothing needs pulling, and an image of one layer
# needs no image builder. `ctr -n k8s.io images import` loads them.
#
# Debian's containerd, runc, containernetworking-plugins, busybox-static and
# iptables (the kubelet's chains) are installed with apt-get when missing (as root only; the node needs
# root anyway). The output lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/node-<hash of this script>/ and is
# reused while it exists. Only the path goes to stdout; progress to stderr.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
log() { echo "node build: $*" >&2; }

# Debian package → a file it installs that the node uses.
packages=(
  containerd:/usr/bin/containerd
  containerd:/usr/bin/containerd-shim-runc-v2
  containerd:/usr/bin/ctr
  runc:/usr/sbin/runc
  containernetworking-plugins:/usr/lib/cni/bridge
  containernetworking-plugins:/usr/lib/cni/host-local
  containernetworking-plugins:/usr/lib/cni/loopback
  busybox-static:/bin/busybox
  iptables:/usr/sbin/iptables
)
missing=()
for entry in "${packages[@]}"; do
  package="${entry%%:*}" file="${entry#*:}"
  [[ -x "$file" ]] || [[ " ${missing[*]} " == *" $package "* ]] || missing+=("$package")
done
if ((${#missing[@]})); then
  [[ "$(id -u)" -eq 0 ]] || { log "missing ${missing[*]}, and only root may install them"; exit 1; }
  command -v apt-get >/dev/null || { log "missing ${missing[*]}, and there is no apt-get"; exit 1; }
  started=$SECONDS
  log "installing ${missing[*]} with apt-get"
  # Another apt may hold the lock for a while (other builds on the machine).
  apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    { apt_get update -qq >&2 && apt_get install -y -qq --no-install-recommends "${missing[@]}" >&2; }
  log "installed in $((SECONDS - started)) s"
fi

key="$(sha256sum <"$0" | cut -c1-12)"
out="${XDG_CACHE_HOME:-$HOME/.cache}/iar/node-$key"
if [[ -x "$out/pause" && -s "$out/pause.tar" && -s "$out/busybox.tar" ]]; then
  echo "$out/pause"
  exit 0
fi
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

# The pause.c of the Kubernetes version tools/kubernetes pins.
version="$(sed -n 's#^[[:space:]]*\(require \)\{0,1\}k8s\.io/kubernetes \(v1\.[0-9.]*\).*$#\2#p' \
  "$here/../kubernetes/go.mod")"
[[ -n "$version" ]] || { log "no k8s.io/kubernetes version in tools/kubernetes/go.mod"; exit 1; }
if [[ ! -x "$out/pause" ]]; then
  command -v go >/dev/null || { log "go is not installed (it fetches pause.c's module)"; exit 1; }
  command -v gcc >/dev/null || { log "gcc is not installed"; exit 1; }
  module="$(cd "$(mktemp -d)" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod \
    go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  source="$module/build/pause/linux/pause.c"
  [[ -f "$source" ]] || { log "no $source"; exit 1; }
  gcc -Os -static -Wall -DVERSION="$version-iar" -o "$out/pause.tmp" "$source"
  strip "$out/pause.tmp"
  mv "$out/pause.tmp" "$out/pause"
  log "built pause from $source"
fi

# image NAME TAR ROOTFS ENTRYPOINT_JSON: a docker-archive of one layer.
image() {
  local name="$1" tar="$2" rootfs="$3" entrypoint="$4"
  local work
  work="$(mktemp -d)"
  # Reproducible: sorted names, root-owned, a fixed time.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$rootfs" -cf "$work/layer.tar" .
  local layer
  layer="$(sha256sum <"$work/layer.tar" | cut -d' ' -f1)"
  mkdir "$work/$layer"
  mv "$work/layer.tar" "$work/$layer/layer.tar"
  printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",%s,%s}' \
    "\"config\":{\"Entrypoint\":$entrypoint,\"Env\":[\"PATH=/bin\"]}" \
    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer\"]}" >"$work/config.json"
  local config
  config="$(sha256sum <"$work/config.json" | cut -d' ' -f1)"
  mv "$work/config.json" "$work/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
    "$config" "$name" "$layer" >"$work/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$work" -cf "$tar.tmp" manifest.json "$config.json" "$layer"
  mv "$tar.tmp" "$tar"
  rm -rf "$work"
}

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/pause"
cp "$out/pause" "$root/pause/pause"
image iar.test/pause:3.10 "$out/pause.tar" "$root/pause" '["/pause"]'

mkdir -p "$root/busybox/bin" "$root/busybox/tmp"
chmod 1777 "$root/busybox/tmp"
cp /bin/busybox "$root/busybox/bin/busybox"
for applet in $(/bin/busybox --list); do
  [[ "$applet" == busybox ]] || ln -s busybox "$root/busybox/bin/$applet"
done
image iar.test/busybox:1 "$out/busybox.tar" "$root/busybox" '["/bin/sh"]'
log "images in $out: $(du -h "$out/pause.tar" | cut -f1) pause, $(du -h "$out/busybox.tar" | cut -f1) busybox"
echo "$out/pause"
