// Package cabi is the WebAssembly component model's canonical ABI, by hand,
// for the few types iar's contract uses: strings, lists, options, results,
// records of those. The host copies arguments into memory it gets from
// cabi_realloc and reads results from memory the guest points it at; both
// are Go allocations kept reachable here ("pinned") until the host is done
// with them, because Go's collector would otherwise free memory only the
// host refers to. Go's collector does not move objects, so reachability is
// all a pin needs.
package cabi

import (
	"runtime/debug"
	"unsafe"
)

// pins holds every allocation the host may still read or write.
var pins = map[uintptr][]uint64{}

// Alloc returns size bytes, 8-aligned (the strictest alignment the
// contract's types need), zeroed and pinned until Release.
func Alloc(size uint32) unsafe.Pointer {
	words := make([]uint64, (size+7)/8+1)
	p := unsafe.Pointer(unsafe.SliceData(words))
	pins[uintptr(p)] = words
	return p
}

// Release unpins everything: called once the host has copied what it
// needed (after an export's arguments are lifted, after post-return).
// Not after an import call: an export's result area, pinned before the
// plugin's code runs, must stay pinned across the imports that code
// makes (what an import's results pinned is released with the export's).
func Release() {
	clear(pins)
	clear(lowered)
	lowered = lowered[:0]
}

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	p := Alloc(newSize)
	if old != nil && oldSize > 0 {
		copy(unsafe.Slice((*byte)(p), min(oldSize, newSize)), unsafe.Slice((*byte)(old), oldSize))
		delete(pins, uintptr(old))
	}
	return p
}

// String copies a string the host placed at ptr.
func String(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(Ptr(ptr)), n))
}

// Lifted is the string the host placed at ptr for an export's argument,
// not copied: the host wrote it into memory it got from cabi_realloc, a
// Go allocation nothing else writes to once the call started, and the
// string's pointer keeps that allocation alive after Release unpins it.
// (An item is a string of its size, and on wasm each copy of it is an
// allocation of that size.)
func Lifted(ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(Ptr(ptr)), n)
}

// Ptr turns an address in linear memory into a pointer.
func Ptr(addr uint32) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(nil), addr)
}

// Addr is the linear-memory address of p.
func Addr(p unsafe.Pointer) uint32 {
	return uint32(uintptr(p))
}

// LowerString pins s and returns its address and length: the host reads
// it after the call returns, so s is kept reachable (lowered) until
// Release. Not a copy: a returned item is a string of its size, and on
// wasm each copy is an allocation of that size. (Go strings are
// immutable and the collector does not move objects.)
func LowerString(s string) (uint32, uint32) {
	if len(s) == 0 {
		return 0, 0
	}
	lowered = append(lowered, s)
	return Addr(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
}

// lowered holds the strings lowered since the last Release.
var lowered []string

// Borrow points the host at s for the length of an import call (the
// host copies it before returning, and s stays alive until then).
func Borrow(s string) (uint32, uint32) {
	return Addr(unsafe.Pointer(unsafe.StringData(s))), uint32(len(s))
}

// Area is a record in linear memory being written or read at offsets.
type Area uint32

// NewArea is a pinned, zeroed record of size bytes.
func NewArea(size uint32) Area { return Area(Addr(Alloc(size))) }

func (a Area) at(off uint32) unsafe.Pointer { return Ptr(uint32(a) + off) }

func (a Area) U8(off uint32) uint8         { return *(*uint8)(a.at(off)) }
func (a Area) U32(off uint32) uint32       { return *(*uint32)(a.at(off)) }
func (a Area) I64(off uint32) int64        { return *(*int64)(a.at(off)) }
func (a Area) SetU8(off uint32, v uint8)   { *(*uint8)(a.at(off)) = v }
func (a Area) SetU32(off uint32, v uint32) { *(*uint32)(a.at(off)) = v }
func (a Area) SetI64(off uint32, v int64)  { *(*int64)(a.at(off)) = v }
func (a Area) SetU64(off uint32, v uint64) { *(*uint64)(a.at(off)) = v }
func (a Area) SetBool(off uint32, v bool) {
	if v {
		a.SetU8(off, 1)
	} else {
		a.SetU8(off, 0)
	}
}

// Str reads the string (pointer, length) at off.
func (a Area) Str(off uint32) string { return String(a.U32(off), a.U32(off+4)) }

// SetStr writes s, pinned (LowerString), as (pointer, length) at off.
func (a Area) SetStr(off uint32, s string) {
	p, n := LowerString(s)
	a.SetU32(off, p)
	a.SetU32(off+4, n)
}

// SetOptStr writes option<string> at off (discriminant, then the string
// at off+4).
func (a Area) SetOptStr(off uint32, s *string) {
	if s == nil {
		a.SetU8(off, 0)
		return
	}
	a.SetU8(off, 1)
	a.SetStr(off+4, *s)
}

// The WASI adapter's own allocations (its state, once per instance) come
// from this arena, never from Go's heap: the adapter first allocates while
// Go's runtime is still initialising (a clock read in _initialize), when
// Go code that allocates cannot run, and the adapter must not take pages
// with memory.grow either, since Go assumes it owns all memory past its
// data.
var adapterArena [adapterArenaSize]byte

const adapterArenaSize = 128 << 10

var adapterUsed uint32

//go:wasmexport cabi_realloc_adapter
func cabiReallocAdapter(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	start := (adapterUsed + align - 1) &^ (align - 1)
	if old != nil || start+newSize > adapterArenaSize {
		return nil
	}
	adapterUsed = start + newSize
	return unsafe.Pointer(&adapterArena[start])
}

// The host calls cabi_realloc while it lowers an import's results or an
// export's arguments, and there the component model forbids calling out
// of the instance. A collection started by an allocation reads the clock
// (a WASI import), so one starting inside cabi_realloc traps ("cannot
// leave component instance"). So the collector is off except while a
// plugin's own code runs: Enter turns it on at an export's start, Leave
// off at its end, and NoGC keeps it off across an import call.

func init() { debug.SetGCPercent(-1) }

// Enter turns the collector on for an export call; Leave turns it off.
func Enter() { debug.SetGCPercent(100) }

// Leave turns the collector off once an export's results are written
// (and waits for a collection under way to end).
func Leave() { debug.SetGCPercent(-1) }

// NoGC runs an import call with the collector off, then restores it.
func NoGC(call func()) {
	prev := debug.SetGCPercent(-1)
	call()
	debug.SetGCPercent(prev)
}
