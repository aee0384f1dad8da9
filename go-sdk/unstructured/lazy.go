package unstructured

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// FromJSONLazy is FromJSON for an item whose code reads and changes it only
// through Unstructured's methods (velero.ItemsThroughMethods): the text is
// skimmed, not decoded, and Object stays nil until UnstructuredContent()
// or DeepCopy() decodes it whole. The methods decode only what they read:
// GetName metadata (skimmed in turn) and its name, SetLabel the labels
// (skimmed too: a label is a member added). MarshalJSON writes the text as it
// came with only what the methods changed written anew (a changed label:
// metadata's other members as they came, the labels encoded). The text
// must be JSON (as the host's items are: it checked them); one the skim
// cannot read (a top-level key with an escape, anything unexpected) is
// decoded by FromJSON at once.
func FromJSONLazy(text string) (*Unstructured, error) {
	i := skipSpace(text, 0)
	if i < len(text) && text[i] == '{' {
		if o := skimObject(text, i); o != nil && skipSpace(text, o.end) == len(text) {
			return &Unstructured{lazy: o}, nil
		}
	}
	return FromJSON(text)
}

// lazyObject is an object known by where its members are in a text (a
// skim, as the Rust SDK's: where each value ends, nothing decoded), with
// the members the methods read (decoded from their text, then kept) or
// changed.
type lazyObject struct {
	text       string
	start, end int // the object's bytes
	members    []span
	changes    []change
}

// span is one member in the text: its key (which had no escape) and
// where the member (from its key's quote) and its value are.
type span struct {
	key                  string
	keyAt, keyEnd        int // text[keyAt:keyEnd] is the quoted key
	valueStart, valueEnd int
}

// change is a member as the methods left it: decoded from its text (and
// perhaps changed since, if it is a container), set, or deleted.
type change struct {
	key string
	// val is the member's value: a *lazyObject for a member skimmed in
	// turn (metadata, then its labels or annotations), else a value as
	// the decoder gives them.
	val any
	// decoded says val was decoded (or skimmed) from the member's text,
	// with src for a container (so an unchanged one is written as it
	// came).
	decoded bool
	src     *source
	deleted bool
	// changed is dirty()'s last answer.
	changed bool
}

// skimObject skims the object at text[i] ('{'); nil if it cannot (a key
// with an escape, which only a decoder compares rightly, or anything
// unexpected).
func skimObject(text string, i int) *lazyObject {
	o := &lazyObject{text: text, start: i, members: make([]span, 0, 16)}
	i = skipSpace(text, i+1)
	if i < len(text) && text[i] == '}' {
		o.end = i + 1
		return o
	}
	for {
		if i >= len(text) || text[i] != '"' {
			return nil
		}
		keyEnd := skipString(text, i)
		if keyEnd < 0 {
			return nil
		}
		key := text[i+1 : keyEnd-1]
		if strings.IndexByte(key, '\\') >= 0 {
			return nil
		}
		j := skipSpace(text, keyEnd)
		if j >= len(text) || text[j] != ':' {
			return nil
		}
		vStart := skipSpace(text, j+1)
		vEnd := skipValue(text, vStart)
		if vEnd < 0 {
			return nil
		}
		o.members = append(o.members, span{key, i, keyEnd, vStart, vEnd})
		i = skipSpace(text, vEnd)
		if i < len(text) && text[i] == ',' {
			i = skipSpace(text, i+1)
			continue
		}
		if i < len(text) && text[i] == '}' {
			o.end = i + 1
			return o
		}
		return nil
	}
}

func skipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// The skim looks at eight bytes at a time (SWAR: a word's bytes compared
// at once), since it passes over every byte of the item: on wasm a
// byte-at-a-time loop over the bench Pod's 4.7 KB was most of a labels
// call. Only strings and brackets are looked at: the host checked the
// text.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// zeros has the high bit of each zero byte of v set (and no other bits
// below the first such byte).
func zeros(v uint64) uint64 { return (v - ones) &^ v & highs }

// bytesOf is s's bytes, not copied.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// skipString is where the string starting at s[i] (a quote) ends, past
// its closing quote (-1: unterminated).
func skipString(s string, i int) int {
	b := bytesOf(s)
	i++
	for {
		for i+8 <= len(b) {
			w := load8(b, i)
			if m := zeros(w^(ones*'"')) | zeros(w^(ones*'\\')); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i += 2
		default:
			i++
		}
	}
}

// skipValue is where the value starting at s[i] ends (-1: it does not).
func skipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		return skipContainer(s, i)
	case ',', '}', ']', ':':
		return -1
	}
	start := i
	for i < len(s) {
		switch s[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// skipContainer is where the object or array starting at s[i] ends.
func skipContainer(s string, i int) int {
	b := bytesOf(s)
	depth := 0
	for {
		// To the next byte that may be a quote or a bracket: c|0x26 is
		// 0x7f for each of {}[] (and for 'Y', '_', 'y' and DEL, which the
		// switch passes over).
		for i+8 <= len(b) {
			w := load8(b, i)
			if m := zeros(w^(ones*'"')) | zeros((w|(ones*0x26))^(ones*0x7f)); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			// skipString, inlined: on wasm a call costs more than the
			// search of a short string.
			i++
			for {
				for i+8 <= len(b) {
					w := load8(b, i)
					if m := zeros(w^(ones*'"')) | zeros(w^(ones*'\\')); m != 0 {
						i += bits.TrailingZeros64(m) >> 3
						break
					}
					i += 8
				}
				if i >= len(b) {
					return -1
				}
				if b[i] == '"' {
					break
				}
				if b[i] == '\\' {
					i++
				}
				i++
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
		}
		i++
	}
}

// find is the member whose key is k (the last, as a decoder keeps the
// last of repeated keys), -1 if none.
func (o *lazyObject) find(k string) int {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].key == k {
			return i
		}
	}
	return -1
}

func (o *lazyObject) change(k string) *change {
	for i := range o.changes {
		if o.changes[i].key == k {
			return &o.changes[i]
		}
	}
	return nil
}

// get is member k's value (nil if absent), decoded on first use.
func (o *lazyObject) get(k string) any {
	if c := o.change(k); c != nil {
		if s, ok := c.val.(*lazyObject); ok {
			// Skimmed so far (sub): now decoded, with its changes.
			m, src := s.object()
			*c = change{key: k, val: m, decoded: true, src: src}
		}
		return c.val
	}
	i := o.find(k)
	if i < 0 {
		return nil
	}
	m := &o.members[i]
	v, src, err := decodeAny(o.text[m.valueStart:m.valueEnd])
	if err != nil {
		// The host checked its items' text (FromJSONLazy is for those).
		panic(fmt.Sprintf("the item's %q is not JSON: %v", k, err))
	}
	o.changes = append(o.changes, change{key: k, val: v, decoded: true, src: src})
	return v
}

func (o *lazyObject) set(k string, v any) {
	if c := o.change(k); c != nil {
		*c = change{key: k, val: v}
		return
	}
	o.changes = append(o.changes, change{key: k, val: v})
}

func (o *lazyObject) del(k string) {
	if c := o.change(k); c != nil {
		*c = change{key: k, deleted: true}
		return
	}
	if o.find(k) >= 0 {
		o.changes = append(o.changes, change{key: k, deleted: true})
	}
}

// sub is member k as a lazyObject, skimmed on first use; nil if it is
// not an object (or a skim cannot read it: then it is decoded by get).
func (o *lazyObject) sub(k string) *lazyObject {
	if c := o.change(k); c != nil {
		s, _ := c.val.(*lazyObject)
		return s
	}
	i := o.find(k)
	if i < 0 {
		return nil
	}
	m := &o.members[i]
	if o.text[m.valueStart] != '{' {
		return nil
	}
	s := skimObject(o.text, m.valueStart)
	if s == nil || s.end != m.valueEnd {
		return nil
	}
	o.changes = append(o.changes, change{key: k, val: s, decoded: true})
	return s
}

// strings is strMap of o: its members that are strings.
func (o *lazyObject) strings() map[string]string {
	out := make(map[string]string, len(o.members)+len(o.changes))
	for i := range o.members {
		m := &o.members[i]
		if o.change(m.key) != nil {
			continue
		}
		// In order, so that of repeated keys the last is kept.
		v, _, err := decodeAny(o.text[m.valueStart:m.valueEnd])
		if s, ok := v.(string); ok && err == nil {
			out[m.key] = s
		} else {
			delete(out, m.key)
		}
	}
	for i := range o.changes {
		c := &o.changes[i]
		if s, ok := c.val.(string); ok && !c.deleted {
			out[c.key] = s
		} else {
			delete(out, c.key)
		}
	}
	return out
}

// dirty is whether anything in o differs from its text. It leaves each
// change's answer in its changed, for marshal.
func (o *lazyObject) dirty() bool {
	dirty := false
	for i := range o.changes {
		c := &o.changes[i]
		c.changed = c.dirty()
		dirty = dirty || c.changed
	}
	return dirty
}

func (c *change) dirty() bool {
	if c.deleted || !c.decoded {
		return true
	}
	switch v := c.val.(type) {
	case *lazyObject:
		return v.dirty()
	case map[string]any, []any:
		return c.src == nil || !c.src.unchanged(v, 0)
	}
	return false // a scalar only set() replaces
}

// marshal appends o's JSON: its text if nothing changed, else its members
// as they came but for the changed ones, and those set anew after them.
func (o *lazyObject) marshal(b []byte) ([]byte, error) {
	if !o.dirty() {
		return append(b, o.text[o.start:o.end]...), nil
	}
	return o.marshalChanged(b)
}

// marshalChanged is marshal once dirty() said o changed.
func (o *lazyObject) marshalChanged(b []byte) ([]byte, error) {
	b = append(b, '{')
	n := 0
	var err error
	for i := range o.members {
		m := &o.members[i]
		c := o.change(m.key)
		if c != nil && (c.deleted || o.find(m.key) != i) {
			continue // deleted, or repeated: written once, at its last
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		if c == nil || !c.changed {
			b = append(b, o.text[m.keyAt:m.valueEnd]...)
			continue
		}
		b = append(b, o.text[m.keyAt:m.keyEnd]...)
		b = append(b, ':')
		if b, err = c.marshal(b); err != nil {
			return nil, err
		}
	}
	// Members set anew, in key order.
	var added []*change
	for i := range o.changes {
		if c := &o.changes[i]; !c.deleted && !c.decoded && o.find(c.key) < 0 {
			added = append(added, c)
		}
	}
	if len(added) > 1 {
		slices.SortFunc(added, func(a, b *change) int { return strings.Compare(a.key, b.key) })
	}
	for _, c := range added {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = encodeString(b, c.key)
		b = append(b, ':')
		if b, err = c.marshal(b); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// marshal writes a change dirty() found changed.
func (c *change) marshal(b []byte) ([]byte, error) {
	switch v := c.val.(type) {
	case *lazyObject:
		return v.marshalChanged(b)
	case map[string]any, []any:
		if c.src != nil {
			return c.src.encodeRoot(b, v)
		}
	}
	return encode(b, c.val)
}

// object decodes o whole: the text, with the changes made to it.
func (o *lazyObject) object() (map[string]any, *source) {
	obj, src, err := decodeWithSource(o.text[o.start:o.end], true)
	if err != nil {
		panic(fmt.Sprintf("the item is not JSON: %v", err))
	}
	o.apply(obj)
	return obj, src
}

// apply makes obj, o's text decoded, what o's changes made of it.
func (o *lazyObject) apply(obj map[string]any) {
	for i := range o.changes {
		c := &o.changes[i]
		if c.deleted {
			delete(obj, c.key)
			continue
		}
		switch v := c.val.(type) {
		case *lazyObject:
			if m, ok := obj[c.key].(map[string]any); ok {
				v.apply(m)
			}
		default:
			if c.dirty() {
				obj[c.key] = v
			}
		}
	}
}

// decodeAny decodes text holding one value, and for a container where its
// parts are in text.
func decodeAny(text string) (any, *source, error) {
	if len(text) >= 2 && text[0] == '"' {
		// A string without escapes (a name, a namespace): itself.
		s := text[1 : len(text)-1]
		if skipString(text, 0) == len(text) && strings.IndexByte(s, '\\') < 0 && utf8.ValidString(s) {
			return s, nil, nil
		}
	}
	d := stacks.Get().(*decoder)
	defer d.release()
	d.s = text
	if len(text) > 0 && (text[0] == '{' || text[0] == '[') {
		d.src = newSource(text)
	}
	v, err := d.value(0)
	if err == nil && d.pos != len(text) {
		err = d.errorf("text after the value")
	}
	if err != nil {
		return nil, nil, err
	}
	if d.invalid {
		return v, nil, nil
	}
	return v, d.src, nil
}
