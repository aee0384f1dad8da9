package unstructured

import (
	"unsafe"
)

// source is the text an object was decoded from and where each container
// of the decoded tree sits in it, so that what a plugin left as it was can
// be written back as the bytes it came as.
//
// A value counts as unchanged when it is still the very value decoded
// (same(): the same map, the same boxed string or array) and, for a
// container, when each of its members or elements is unchanged in turn:
// identity, not equality, so the check costs a walk over the tree and no
// comparison of bytes. Anything a plugin puts in, even an equal value,
// is written by the encoder.
type source struct {
	text  string
	nodes []node
	ents  []entry
	// root is the decoded object's map (mapID).
	root unsafe.Pointer
}

// node is one container: its bytes are text[start:end], its recorded
// members or elements ents[first:first+n]. An object records only the
// members whose key is a slice of the text (unescaped, non-empty: found
// again by where its bytes are), ordered by that offset; count is how
// many members it had, so an object with an escaped or repeated key
// (count > n or more members than map entries) is never unchanged.
type node struct {
	start, end int32
	first, n   int32
	count      int32
}

// entry is one member or element as decoded.
type entry struct {
	key        int32 // an object member's key: its offset in text
	child      int32 // the value's node, -1 for a scalar
	start, end int32 // the value's bytes
	val        any
}

// open starts a container at start and returns its node (-1 without a
// source).
func (s *source) open(start int) int32 {
	if s == nil {
		return -1
	}
	s.nodes = append(s.nodes, node{start: int32(start)})
	return int32(len(s.nodes) - 1)
}

// close ends an empty container.
func (s *source) close(n int32, end int, _ []entry) {
	if s == nil {
		return
	}
	s.nodes[n].end = int32(end)
	s.nodes[n].first = int32(len(s.ents))
}

func (s *source) closeMembers(n int32, end int, ms []member) {
	if s == nil {
		return
	}
	nd := &s.nodes[n]
	nd.end = int32(end)
	nd.first = int32(len(s.ents))
	nd.count = int32(len(ms))
	for i := range ms {
		if ms[i].key >= 0 {
			s.ents = append(s.ents, ms[i].entry)
		}
	}
	nd.n = int32(len(s.ents)) - nd.first
}

func (s *source) closeElems(n int32, end int, es []elem) {
	if s == nil {
		return
	}
	nd := &s.nodes[n]
	nd.end = int32(end)
	nd.first = int32(len(s.ents))
	nd.count = int32(len(es))
	for i := range es {
		s.ents = append(s.ents, es[i].entry)
	}
	nd.n = nd.count
}

// offset is where k's bytes start in the text, -1 if k is not a
// non-empty slice of it.
func (s *source) offset(k string) int {
	if len(k) == 0 {
		return -1
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(k)))
	base := uintptr(unsafe.Pointer(unsafe.StringData(s.text)))
	if p < base || p >= base+uintptr(len(s.text)) {
		return -1
	}
	return int(p - base)
}

func (s *source) entries(n int32) []entry {
	nd := &s.nodes[n]
	return s.ents[nd.first : nd.first+nd.n]
}

// member is the entry of the object at node n whose key is k's bytes.
func (s *source) member(n int32, k string) *entry {
	off := s.offset(k)
	if off < 0 {
		return nil
	}
	ents := s.entries(n)
	lo, hi := 0, len(ents)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch k := int(ents[mid].key); {
		case k == off:
			return &ents[mid]
		case k < off:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return nil
}

// unchanged says whether v, the value decoded as node n, still holds
// what it was decoded with, all the way down.
func (s *source) unchanged(v any, n int32) bool {
	switch v := v.(type) {
	case map[string]any:
		nd := &s.nodes[n]
		if len(v) != int(nd.count) || nd.count != nd.n {
			return false
		}
		for k, x := range v {
			en := s.member(n, k)
			if en == nil || !same(x, en.val) || (en.child >= 0 && !s.unchanged(x, en.child)) {
				return false
			}
		}
		return true
	case []any:
		ents := s.entries(n)
		if len(v) != len(ents) {
			return false
		}
		for i, x := range v {
			en := &ents[i]
			if !same(x, en.val) || (en.child >= 0 && !s.unchanged(x, en.child)) {
				return false
			}
		}
		return true
	}
	return false
}

// encode writes m, the object decoded as the root: as the text it came
// as if nothing in it changed, else with each unchanged subtree copied.
func (s *source) encode(b []byte, m map[string]any) ([]byte, error) {
	return s.encodeRoot(b, m)
}

// encodeRoot writes v, the container decoded as the root, as encode does.
func (s *source) encodeRoot(b []byte, v any) ([]byte, error) {
	e := encoder{b: b, src: s}
	var err error
	switch v := v.(type) {
	case map[string]any:
		err = e.object(v, 0)
	case []any:
		err = e.array(v, 0)
	default:
		err = e.value(v)
		e.changed = true
	}
	if err != nil {
		return nil, err
	}
	root := &s.nodes[0]
	if !e.changed && s.wholeAt(v, root) {
		// Every member or element was written as it came and none is
		// missing: the text itself (whatever its key order and spacing).
		return append(b, s.text[root.start:root.end]...), nil
	}
	return e.b, nil
}

// wholeAt is whether v has as many members or elements as root recorded
// (an object: with no key escaped or repeated).
func (s *source) wholeAt(v any, root *node) bool {
	switch v := v.(type) {
	case map[string]any:
		return len(v) == int(root.count) && root.count == root.n
	case []any:
		return len(v) == int(root.n)
	}
	return false
}

// eface is the layout of an `any`.
type eface struct {
	typ, data unsafe.Pointer
}

// same is whether a and b are the very same value: the same dynamic type
// and the same data word (a map's pointer, a boxed value's address).
func same(a, b any) bool {
	ea := (*eface)(unsafe.Pointer(&a))
	eb := (*eface)(unsafe.Pointer(&b))
	return ea.typ == eb.typ && ea.data == eb.data
}

// mapID is m's identity.
func mapID(m map[string]any) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&m))
}
