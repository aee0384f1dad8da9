#!/usr/bin/env bash
# Builds Shopify's toxiproxy server (github.com/Shopify/toxiproxy/v2
# v2.5.0, MIT) from this Go module, once per machine, for the fault
# campaign (host/tests/all/faults.rs), which puts it between iar and the S3
# store and the API server. The binary lands in
# ${XDG_CACHE_HOME:-$HOME/.cache}/iar/toxiproxy-server-<hash of go.mod>/;
# only that path goes to stdout, progress to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../go-cli.sh" "$here" toxiproxy-server github.com/Shopify/toxiproxy/v2/cmd/server
