//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package unstructured

import "encoding/binary"

// load8 is b[i:i+8] as a little-endian word.
func load8(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
