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
