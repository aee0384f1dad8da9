package unstructured

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The reference: encoding/json with UseNumber, and without HTML escaping.
func reference(text string) (map[string]any, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, json.Unmarshal([]byte(text), &m)
	}
	return m, nil
}

func referenceEncode(v any) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

var corpus = []string{
	`{}`,
	` {"a" : [ ] , "b":{ }} `,
	`{"s":"plain","e":"q\"b\\s\/n\nr\rt\tb\bf\f","u":"\u00e9\u2028\u0001","pair":"\ud83d\ude00","lone":"\ud83d!","bad":"\ud83dx"}`,
	`{"n":[0,-0,1.5,-2e10,1E+2,123456789012345678901234567890,0.000001]}`,
	`{"t":true,"f":false,"z":null,"nested":{"l":[{"a":[[]]}]}}`,
	"{\"raw\":\"Zo\u00eb <&> \u2029\"}",
	"{\"invalid\":\"\xff\xfe\"}",
}

func TestDecodeAndEncodeAsEncodingJSON(t *testing.T) {
	for _, in := range corpus {
		want, err := reference(in)
		if err != nil {
			t.Fatalf("%s: reference: %v", in, err)
		}
		got, err := decodeObject(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %#v, want %#v", in, got, want)
		}
		enc, err := Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if ref := referenceEncode(want); !bytes.Equal(enc, ref) {
			t.Errorf("%s: encoded %s, want %s", in, enc, ref)
		}
	}
}

func TestInvalidJSONIsRefusedAsEncodingJSONRefusesIt(t *testing.T) {
	for _, in := range []string{
		`{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`,
		`{"a":tru}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":"unterminated}`, `{} {}`, `[]`,
		`{"a":[1 2]}`, `{"a":"\u12"}`, `{1:2}`,
	} {
		_, refErr := reference(in)
		_, err := decodeObject(in)
		if (err == nil) != (refErr == nil) {
			t.Errorf("%q: error %v, encoding/json's %v", in, err, refErr)
		}
	}
}

func TestOtherValuesEncodeAsEncodingJSON(t *testing.T) {
	v := map[string]any{
		"f": 0.1, "i": 3, "i64": int64(-4), "ss": []string{"a"}, "ms": map[string]string{"k": "v"},
		"st": struct{ A int }{1}, "nilslice": []any(nil),
	}
	got, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := referenceEncode(v); !bytes.Equal(got, want) {
		t.Errorf("got %s, want %s", got, want)
	}
}
