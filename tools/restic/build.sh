#!/usr/bin/env bash
# Builds restic's CLI (github.com/restic/restic v0.18.1, BSD-2-Clause) from
# this Go module, once per machine, for the tests that read iar's volume
# repositories with restic itself. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/restic-<hash of go.mod>/restic; only
# that path goes to stdout, progress to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../go-cli.sh" "$here" restic github.com/restic/restic/cmd/restic
