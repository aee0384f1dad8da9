// Package names names the objects a plugin creates.
package names

import (
	"fmt"
	"strings"
)

// ObjectName is a name for an object a plugin creates, the same on every
// try for the same parts (the Rust SDK's object_name, bit for bit): the
// prefix (up to 46 characters, lower-cased, other characters as '-') and
// a 64-bit FNV-1a of the parts, each ended by a NUL.
func ObjectName(prefix string, parts ...string) string {
	digest := uint64(0xcbf29ce484222325)
	for _, p := range parts {
		for _, b := range append([]byte(p), 0) {
			digest ^= uint64(b)
			digest *= 0x100000001b3
		}
	}
	var b strings.Builder
	for i, c := range []rune(prefix) {
		if i == 46 {
			break
		}
		switch {
		case c >= 'A' && c <= 'Z':
			b.WriteRune(c + 'a' - 'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		default:
			b.WriteByte('-')
		}
	}
	p := strings.Trim(b.String(), "-")
	if p == "" {
		p = "iar"
	}
	return fmt.Sprintf("%s-%016x", p, digest)
}
