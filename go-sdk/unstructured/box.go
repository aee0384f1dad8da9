package unstructured

import (
	"encoding/json"
	"unsafe"
)

// slabs box the decoder's strings, numbers and arrays into `any` from
// arrays allocated a few dozen at a time: converting a string to `any`
// allocates its 16-byte header on its own, which was most of a decoded
// item's allocations. An `any` holding a non-pointer type points at an
// immutable copy of its value; here that copy is an element of a slab,
// written once before it is boxed and never again, which is all the
// runtime asks of it (the collector keeps the whole slab alive while any
// of its values is referenced).
type slabs struct {
	strs  []string
	nums  []json.Number
	lists [][]any
}

var (
	stringType = typeOf("")
	numberType = typeOf(json.Number(""))
	listType   = typeOf([]any(nil))
)

func typeOf(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

// box is the `any` whose type is typ and whose value is *data.
func box(typ, data unsafe.Pointer) any {
	var v any
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, data
	return v
}

// slabSize grows with use: a small item takes a small slab.
func slabSize(used int) int { return min(max(16, used), 256) }

func (s *slabs) str(v string) any {
	if len(s.strs) == cap(s.strs) {
		s.strs = make([]string, 0, slabSize(cap(s.strs)*2))
	}
	s.strs = append(s.strs, v)
	return box(stringType, unsafe.Pointer(&s.strs[len(s.strs)-1]))
}

func (s *slabs) num(v json.Number) any {
	if len(s.nums) == cap(s.nums) {
		s.nums = make([]json.Number, 0, slabSize(cap(s.nums)*2))
	}
	s.nums = append(s.nums, v)
	return box(numberType, unsafe.Pointer(&s.nums[len(s.nums)-1]))
}

func (s *slabs) list(v []any) any {
	if len(s.lists) == cap(s.lists) {
		s.lists = make([][]any, 0, slabSize(cap(s.lists)*2))
	}
	s.lists = append(s.lists, v)
	return box(listType, unsafe.Pointer(&s.lists[len(s.lists)-1]))
}
