package unstructured

// A JSON decoder and encoder for objects as map[string]any, without
// encoding/json's reflection: a plugin call decodes its item and encodes
// the result once each, and on wasm encoding/json was most of a labels
// call's time. Values decode as encoding/json with UseNumber decodes them
// (numbers as json.Number); anything the encoder does not know (a struct a
// plugin put into an object) is encoded by encoding/json.
//
// Two things keep a call cheap on wasm, where every allocation and every
// byte written costs several times what it does natively:
//
//   - The decoder allocates little: an object's members are gathered on a
//     stack and its map made at its final size, an array's elements
//     likewise, and strings, numbers and arrays are boxed into `any` from
//     slabs rather than one allocation each (box.go).
//   - The decoder records where each container came from in the text (a
//     source), and MarshalJSON writes a subtree that is still the one
//     decoded, with the same members holding the same values, as the bytes
//     it came as. A labels call re-encodes only metadata and copies the
//     rest (splice.go).

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

type decoder struct {
	s   string
	pos int
	// src records the containers' places in s (nil: not recorded).
	src *source
	// members and elems are the stacks the containers being read gather
	// their contents on.
	members []member
	elems   []elem
	slabs   slabs
	// invalid is set when a string held invalid UTF-8 (decoded as
	// U+FFFD): its bytes must not be written back as they came.
	invalid bool
}

// stacks keeps decoders, for their stacks' memory.
var stacks = sync.Pool{New: func() any { return new(decoder) }}

func (d *decoder) release() {
	*d = decoder{members: d.members[:0], elems: d.elems[:0]}
	stacks.Put(d)
}

// member is an object member being read.
type member struct {
	name string
	entry
}

// elem is an array element being read.
type elem struct {
	entry
}

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *decoder) space() {
	for d.pos < len(d.s) {
		switch d.s[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// decodeObject parses text holding exactly one JSON object.
func decodeObject(text string) (map[string]any, error) {
	m, _, err := decodeWithSource(text, false)
	return m, err
}

// decodeWithSource parses text holding exactly one JSON object and, if
// record, where its containers sit in text (nil when they cannot be
// written back as they came).
func decodeWithSource(text string, record bool) (map[string]any, *source, error) {
	d := stacks.Get().(*decoder)
	defer d.release()
	d.s = text
	if record {
		d.src = newSource(text)
	}
	d.space()
	if d.pos >= len(d.s) || d.s[d.pos] != '{' {
		return nil, nil, d.errorf("not an object")
	}
	v, err := d.value(0)
	if err != nil {
		return nil, nil, err
	}
	d.space()
	if d.pos != len(d.s) {
		return nil, nil, d.errorf("text after the object")
	}
	m := v.(map[string]any)
	if d.src == nil || d.invalid {
		return m, nil, nil
	}
	d.src.root = mapID(m)
	return m, d.src, nil
}

// newSource is a source for text (nil for one too long for its offsets).
func newSource(text string) *source {
	if len(text) >= math.MaxInt32 {
		return nil
	}
	// Sized for Kubernetes objects' usual density, so the slices seldom
	// grow.
	return &source{
		text:  text,
		nodes: make([]node, 0, len(text)/48+4),
		ents:  make([]entry, 0, len(text)/12+8),
	}
}

// maxDepth bounds nesting, as encoding/json does (10000).
const maxDepth = 10000

// value reads one value.
func (d *decoder) value(depth int) (any, error) {
	v, _, err := d.valueEntry(depth)
	return v, err
}

// valueEntry reads one value and returns it with its node (-1 for a
// scalar or without a source).
func (d *decoder) valueEntry(depth int) (any, int32, error) {
	if depth > maxDepth {
		return nil, -1, d.errorf("nested too deeply")
	}
	d.space()
	if d.pos >= len(d.s) {
		return nil, -1, d.errorf("unexpected end")
	}
	switch c := d.s[d.pos]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return nil, -1, err
		}
		return d.slabs.str(s), -1, nil
	case c == 't':
		return true, -1, d.literal("true")
	case c == 'f':
		return false, -1, d.literal("false")
	case c == 'n':
		return nil, -1, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		n, err := d.number()
		if err != nil {
			return nil, -1, err
		}
		return d.slabs.num(n), -1, nil
	default:
		return nil, -1, d.errorf("unexpected %q", c)
	}
}

// object reads an object at '{'.
func (d *decoder) object(depth int) (any, int32, error) {
	start := d.pos
	d.pos++
	node := d.src.open(start)
	base := len(d.members)
	d.space()
	if d.pos < len(d.s) && d.s[d.pos] == '}' {
		d.pos++
		d.src.close(node, d.pos, nil)
		return map[string]any{}, node, nil
	}
	for {
		d.space()
		if d.pos >= len(d.s) || d.s[d.pos] != '"' {
			return nil, -1, d.errorf("expected a key")
		}
		keyAt := d.pos + 1
		k, err := d.str()
		if err != nil {
			return nil, -1, err
		}
		d.space()
		if d.pos >= len(d.s) || d.s[d.pos] != ':' {
			return nil, -1, d.errorf("expected ':'")
		}
		d.pos++
		d.space()
		vStart := d.pos
		v, child, err := d.valueEntry(depth + 1)
		if err != nil {
			return nil, -1, err
		}
		// A key is known again by where its bytes are: one that was
		// unescaped is a slice of the text at keyAt.
		key := int32(-1)
		if d.src != nil && len(k) > 0 && d.src.offset(k) == keyAt {
			key = int32(keyAt)
		}
		d.members = append(d.members, member{k, entry{key: key, child: child, start: int32(vStart), end: int32(d.pos), val: v}})
		done, err := d.next('}')
		if err != nil {
			return nil, -1, err
		}
		if done {
			break
		}
	}
	ms := d.members[base:]
	m := make(map[string]any, len(ms))
	for i := range ms {
		m[ms[i].name] = ms[i].val
	}
	d.src.closeMembers(node, d.pos, ms)
	clear(ms)
	d.members = d.members[:base]
	return m, node, nil
}

// array reads an array at '['.
func (d *decoder) array(depth int) (any, int32, error) {
	start := d.pos
	d.pos++
	node := d.src.open(start)
	d.space()
	if d.pos < len(d.s) && d.s[d.pos] == ']' {
		d.pos++
		d.src.close(node, d.pos, nil)
		return d.slabs.list([]any{}), node, nil
	}
	base := len(d.elems)
	for {
		d.space()
		vStart := d.pos
		v, child, err := d.valueEntry(depth + 1)
		if err != nil {
			return nil, -1, err
		}
		d.elems = append(d.elems, elem{entry{key: -1, child: child, start: int32(vStart), end: int32(d.pos), val: v}})
		done, err := d.next(']')
		if err != nil {
			return nil, -1, err
		}
		if done {
			break
		}
	}
	es := d.elems[base:]
	l := make([]any, len(es))
	for i := range es {
		l[i] = es[i].val
	}
	d.src.closeElems(node, d.pos, es)
	clear(es)
	d.elems = d.elems[:base]
	return d.slabs.list(l), node, nil
}

// next reads ',' (false) or the closing byte (true).
func (d *decoder) next(closing byte) (bool, error) {
	d.space()
	if d.pos >= len(d.s) {
		return false, d.errorf("unexpected end")
	}
	switch d.s[d.pos] {
	case ',':
		d.pos++
		return false, nil
	case closing:
		d.pos++
		return true, nil
	}
	return false, d.errorf("expected ',' or %q", closing)
}

func (d *decoder) literal(word string) error {
	if len(d.s)-d.pos < len(word) || d.s[d.pos:d.pos+len(word)] != word {
		return d.errorf("invalid literal")
	}
	d.pos += len(word)
	return nil
}

func (d *decoder) number() (json.Number, error) {
	start := d.pos
	for d.pos < len(d.s) {
		switch c := d.s[d.pos]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			d.pos++
			continue
		}
		break
	}
	n := d.s[start:d.pos]
	if !validNumber(n) {
		return "", d.errorf("invalid number %q", n)
	}
	return json.Number(n), nil
}

// validNumber is JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(n string) bool {
	i := 0
	digits := func() int {
		start := i
		for i < len(n) && n[i] >= '0' && n[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(n) && n[i] == '-' {
		i++
	}
	if i < len(n) && n[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(n) && n[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(n) && (n[i] == 'e' || n[i] == 'E') {
		i++
		if i < len(n) && (n[i] == '+' || n[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(n)
}

func (d *decoder) str() (string, error) {
	d.pos++ // the opening quote
	start := d.pos
	// The common case: no escapes, no control characters, and (checked
	// only if a byte is not ASCII) valid UTF-8: a slice of the text.
	var high byte
	for d.pos < len(d.s) {
		c := d.s[d.pos]
		if c == '"' {
			s := d.s[start:d.pos]
			d.pos++
			if high >= utf8.RuneSelf && !utf8.ValidString(s) {
				d.invalid = true
				return string([]rune(s)), nil // invalid bytes as U+FFFD
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		high |= c
		d.pos++
	}
	buf := []byte(d.s[start:d.pos])
	for d.pos < len(d.s) {
		c := d.s[d.pos]
		switch {
		case c == '"':
			d.pos++
			if !utf8.Valid(buf) {
				d.invalid = true
				return string([]rune(string(buf))), nil
			}
			return string(buf), nil
		case c < 0x20:
			return "", d.errorf("control character in a string")
		case c != '\\':
			buf = append(buf, c)
			d.pos++
			continue
		}
		if d.pos+1 >= len(d.s) {
			return "", d.errorf("unexpected end")
		}
		e := d.s[d.pos+1]
		d.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", d.errorf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if d.pos+1 < len(d.s) && d.s[d.pos] == '\\' && d.s[d.pos+1] == 'u' {
					save := d.pos
					d.pos += 2
					if lo, ok := d.hex4(); ok && utf16.DecodeRune(r, lo) != utf8.RuneError {
						r2 = utf16.DecodeRune(r, lo)
					} else {
						d.pos = save
					}
				}
				r = r2
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", d.errorf("invalid escape \\%c", e)
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.s)-d.pos < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(d.s[d.pos:d.pos+4], 16, 32)
	if err != nil {
		return 0, false
	}
	d.pos += 4
	return rune(v), true
}

// encoder appends JSON to b: keys sorted, no HTML escaping. keys is a
// stack the objects being written sort their keys on.
type encoder struct {
	b    []byte
	keys []string
	// src, when set, holds the bytes unchanged containers are written as.
	src *source
	// changed is set when a value under a source's container was written
	// other than as it came.
	changed bool
}

// encode appends v's JSON: keys sorted, no HTML escaping.
func encode(b []byte, v any) ([]byte, error) {
	e := encoder{b: b}
	err := e.value(v)
	return e.b, err
}

func (e *encoder) value(v any) error {
	switch v := v.(type) {
	case nil:
		e.b = append(e.b, "null"...)
	case bool:
		e.b = strconv.AppendBool(e.b, v)
	case string:
		e.b = encodeString(e.b, v)
	case json.Number:
		if v == "" {
			e.b = append(e.b, '0')
		} else {
			e.b = append(e.b, v...)
		}
	case int:
		e.b = strconv.AppendInt(e.b, int64(v), 10)
	case int64:
		e.b = strconv.AppendInt(e.b, v, 10)
	case map[string]any:
		return e.object(v, -1)
	case []any:
		return e.array(v, -1)
	case map[string]string:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = x
		}
		return e.object(m, -1)
	default:
		// Anything else (floats, structs, typed slices) as encoding/json
		// writes it.
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		e.b = append(e.b, j...)
	}
	return nil
}

// object writes m; node is where m was decoded from (-1: nowhere), so a
// member still holding its decoded value is written as it came.
func (e *encoder) object(m map[string]any, node int32) error {
	base := len(e.keys)
	for k := range m {
		e.keys = append(e.keys, k)
	}
	keys := e.keys[base:]
	slices.Sort(keys)
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.b = encodeString(e.b, k)
		e.b = append(e.b, ':')
		v := m[k]
		if node >= 0 {
			if en := e.src.member(node, k); en != nil && same(v, en.val) {
				if err := e.entry(v, en); err != nil {
					return err
				}
				continue
			}
			e.changed = true
		}
		if err := e.value(v); err != nil {
			return err
		}
	}
	clear(keys)
	e.keys = e.keys[:base]
	e.b = append(e.b, '}')
	return nil
}

// array writes l; node as for object.
func (e *encoder) array(l []any, node int32) error {
	if l == nil {
		e.b = append(e.b, "null"...)
		return nil
	}
	var ents []entry
	if node >= 0 {
		ents = e.src.entries(node)
		if len(ents) != len(l) {
			ents = nil
		}
	}
	e.b = append(e.b, '[')
	for i, x := range l {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		if ents != nil && same(x, ents[i].val) {
			if err := e.entry(x, &ents[i]); err != nil {
				return err
			}
			continue
		}
		if node >= 0 {
			e.changed = true
		}
		if err := e.value(x); err != nil {
			return err
		}
	}
	e.b = append(e.b, ']')
	return nil
}

// entry writes v, which is en's decoded value: as its bytes if nothing
// under it changed, else its container again with what is unchanged
// under it as it came.
func (e *encoder) entry(v any, en *entry) error {
	if en.child < 0 || e.src.unchanged(v, en.child) {
		e.b = append(e.b, e.src.text[en.start:en.end]...)
		return nil
	}
	e.changed = true
	switch v := v.(type) {
	case map[string]any:
		return e.object(v, en.child)
	case []any:
		return e.array(v, en.child)
	}
	return e.value(v)
}

const hexDigits = "0123456789abcdef"

// encodeString writes s as encoding/json does with HTML escaping off:
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func encodeString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
