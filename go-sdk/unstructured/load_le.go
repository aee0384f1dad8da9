//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package unstructured

import "unsafe"

// load8 is b[i:i+8] as a little-endian word: one load (the caller checks
// the bounds). On wasm binary.LittleEndian is eight loads.
func load8(b []byte, i int) uint64 { return *(*uint64)(unsafe.Pointer(&b[i])) }
