package unstructured

// A JSON decoder and encoder for objects as map[string]any, without
// encoding/json's reflection: a plugin call decodes its item and encodes
// the result once each, and on wasm encoding/json was most of a labels
// call's time. Values decode as encoding/json with UseNumber decodes them
// (numbers as json.Number); anything the encoder does not know (a struct a
// plugin put into an object) is encoded by encoding/json.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

type decoder struct {
	s   string
	pos int
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
	d := &decoder{s: text}
	d.space()
	if d.pos >= len(d.s) || d.s[d.pos] != '{' {
		return nil, d.errorf("not an object")
	}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.pos != len(d.s) {
		return nil, d.errorf("text after the object")
	}
	return v.(map[string]any), nil
}

// maxDepth bounds nesting, as encoding/json does (10000).
const maxDepth = 10000

func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, d.errorf("nested too deeply")
	}
	d.space()
	if d.pos >= len(d.s) {
		return nil, d.errorf("unexpected end")
	}
	switch c := d.s[d.pos]; {
	case c == '{':
		d.pos++
		m := map[string]any{}
		d.space()
		if d.pos < len(d.s) && d.s[d.pos] == '}' {
			d.pos++
			return m, nil
		}
		for {
			d.space()
			if d.pos >= len(d.s) || d.s[d.pos] != '"' {
				return nil, d.errorf("expected a key")
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.space()
			if d.pos >= len(d.s) || d.s[d.pos] != ':' {
				return nil, d.errorf("expected ':'")
			}
			d.pos++
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			if done, err := d.next('}'); err != nil || done {
				return m, err
			}
		}
	case c == '[':
		d.pos++
		l := []any{}
		d.space()
		if d.pos < len(d.s) && d.s[d.pos] == ']' {
			d.pos++
			return l, nil
		}
		for {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			if done, err := d.next(']'); err != nil || done {
				return l, err
			}
		}
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return nil, d.errorf("unexpected %q", c)
	}
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
	// The common case: no escapes, no control characters.
	for d.pos < len(d.s) {
		c := d.s[d.pos]
		if c == '"' {
			s := d.s[start:d.pos]
			d.pos++
			if !utf8.ValidString(s) {
				return string([]rune(s)), nil // invalid bytes as U+FFFD
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.pos++
	}
	buf := []byte(d.s[start:d.pos])
	for d.pos < len(d.s) {
		c := d.s[d.pos]
		switch {
		case c == '"':
			d.pos++
			if !utf8.Valid(buf) {
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

// encode appends v's JSON: keys sorted, no HTML escaping.
func encode(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case string:
		return encodeString(b, v), nil
	case json.Number:
		if v == "" {
			return append(b, '0'), nil
		}
		return append(b, v...), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = encodeString(b, k)
			b = append(b, ':')
			var err error
			if b, err = encode(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = encode(b, x); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]string:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = x
		}
		return encode(b, m)
	default:
		// Anything else (floats, structs, typed slices) as encoding/json
		// writes it.
		j, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return append(b, j...), nil
	}
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
