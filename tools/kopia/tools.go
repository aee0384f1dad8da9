//go:build tools

// Package tools pins kopia's CLI for bench/repository.sh.
package tools

import _ "github.com/kopia/kopia"
