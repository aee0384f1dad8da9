#!/usr/bin/env bash
# Builds the polyglot example plugins (polyglot/labels-js, polyglot/labels-py)
# into OUT_DIR and prints the path of each component, one per line.
#
#   polyglot/build.sh OUT_DIR
#
# The tools are installed on first use into a per-machine cache,
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/polyglot (npm --prefix there, a Python
# venv there), at the exact versions pinned below; later runs reuse them.
# Only the npm registry and PyPI are contacted, and only to install.
# A component is rebuilt only when its inputs (sources, WIT, tool versions,
# this script) change: a cached run only hashes files.
set -euo pipefail

# Pinned tool versions. componentize-js 0.22.0 is the one jco 1.35.0
# depends on (^0.22.0), so npm installs a single copy of each.
JCO_VERSION=1.35.0
COMPONENTIZE_JS_VERSION=0.22.0
COMPONENTIZE_PY_VERSION=0.25.1

if [ $# -ne 1 ]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/iar/polyglot
mkdir -p "$cache"

log() { echo "polyglot/build.sh: $*" >&2; }

# Seconds since the epoch with fractions, for the timings this prints.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# Serialises concurrent runs (two test binaries, two checkouts) on one cache.
exec 9>"$cache/.lock"
flock 9

# --- tools -----------------------------------------------------------------

npm_dir=$cache/npm-jco-$JCO_VERSION-cjs-$COMPONENTIZE_JS_VERSION
jco=$npm_dir/node_modules/.bin/jco
if [ ! -x "$jco" ] || [ ! -f "$npm_dir/.installed" ]; then
    command -v npm >/dev/null || { log "npm not found: install Node.js (>= 20) and npm"; exit 1; }
    log "installing @bytecodealliance/jco@$JCO_VERSION and componentize-js@$COMPONENTIZE_JS_VERSION into $npm_dir"
    t=$(now)
    rm -rf "$npm_dir"
    mkdir -p "$npm_dir"
    # An empty package.json keeps npm from walking up to a parent project.
    echo '{"private": true}' >"$npm_dir/package.json"
    npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error \
        --save-exact "@bytecodealliance/jco@$JCO_VERSION" \
        "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION" >&2
    touch "$npm_dir/.installed"
    log "npm install took $(since "$t")"
fi

venv=$cache/venv-componentize-py-$COMPONENTIZE_PY_VERSION
componentize_py=$venv/bin/componentize-py
if [ ! -x "$componentize_py" ] || [ ! -f "$venv/.installed" ]; then
    python=$(command -v python3 || true)
    [ -n "$python" ] || { log "python3 not found: install Python (>= 3.10)"; exit 1; }
    log "installing componentize-py==$COMPONENTIZE_PY_VERSION into $venv"
    t=$(now)
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "componentize-py==$COMPONENTIZE_PY_VERSION" >&2
    touch "$venv/.installed"
    log "pip install took $(since "$t")"
fi

if [ "${IAR_POLYGLOT_INSTALL_ONLY:-}" = 1 ]; then
    exit 0
fi

# --- components ------------------------------------------------------------

# Builds $name.wasm with "$@" (which writes to $tmp) unless the hash of its
# inputs matches the stamp left by the last build.
build() {
    local name=$1 inputs=$2
    shift 2
    local wasm=$out/$name.wasm stamp=$out/$name.inputs
    local digest
    # The inputs, this script (tool versions, flags) and the WIT contract.
    digest=$( (cd "$root" && cat $inputs polyglot/build.sh wit/v1.3/plugin.wit) | sha256sum | cut -d' ' -f1)
    if [ -f "$wasm" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$digest" ]; then
        echo "$wasm"
        return
    fi
    log "building $name"
    local t
    t=$(now)
    tmp=$out/.$name.wasm.tmp
    rm -f "$tmp" "$stamp"
    (cd "$root" && "$@") >&2
    mv "$tmp" "$wasm"
    echo "$digest" >"$stamp"
    log "built $name in $(since "$t") ($(wc -c <"$wasm") bytes)"
    echo "$wasm"
}

# JavaScript: StarlingMonkey (SpiderMonkey) plus the module, pre-initialised
# by wizer. `-d` turns off every optional WASI feature, so the component
# imports nothing but iar:plugin/host (console output is then dropped: log
# with the host's `log`).
build_js() {
    "$npm_dir/node_modules/.bin/componentize-js" polyglot/labels-js/labels.js \
        --wit wit/v1.3/plugin.wit --world-name backup-restore-plugin \
        -d stdio random clocks http fetch-event -o "$tmp"
}

# Python: CPython plus the app, pre-initialised. It imports the WASI p2
# interfaces CPython's libc uses, all of which iar's linker provides with no
# rights (no preopens, no environment, no network). VIRTUAL_ENV keeps
# componentize-py from adding the machine's own site-packages to the path.
build_py() {
    rm -rf polyglot/labels-py/__pycache__
    VIRTUAL_ENV=$venv "$componentize_py" -d wit/v1.3/plugin.wit -w backup-restore-plugin \
        componentize -p polyglot/labels-py app -o "$tmp"
    rm -rf polyglot/labels-py/__pycache__
}

build labels-js polyglot/labels-js/labels.js build_js
build labels-py polyglot/labels-py/app.py build_py
