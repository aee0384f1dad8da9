//go:build tools

// Package tools pins restic's CLI, which iar's tests run against the
// volume repositories iar writes: restic's own reader, not rustic_core's.
package tools

import _ "github.com/restic/restic/cmd/restic"
