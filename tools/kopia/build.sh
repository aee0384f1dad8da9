#!/usr/bin/env bash
# Builds kopia's CLI from Velero v1.18.3's fork of github.com/kopia/kopia
# (Apache-2.0), once per machine, for bench/repository.sh: the uploader
# Velero's node agent runs, measured beside iar. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/kopia-<hash of go.mod>/kopia; only
# that path goes to stdout, progress to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../go-cli.sh" "$here" kopia github.com/kopia/kopia
