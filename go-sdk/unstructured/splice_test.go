package unstructured

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Items for the splice and lazy tests: the bench Pod (pretty-printed, as
// the file is), compact and sorted, and objects with what a skim or a
// splice must not get wrong.
func spliceCorpus(t testing.TB) []string {
	pod, err := os.ReadFile("../../examples/bench/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(pod, &v); err != nil {
		t.Fatal(err)
	}
	compact, _ := json.Marshal(v)
	return []string{
		string(pod),
		string(compact),
		podJSON,
		`{}`,
		` { } `,
		`{"metadata":{}}`,
		`{"kind":"A","metadata":"not an object"}`,
		`{"kind":"A","metadata":{"labels":"not an object","name":"n"}}`,
		`{"kind":"A","metadata":{"labels":{"a":"1"},"labels":{"b":"2"}}}`,
		`{"kind":"A","metadata":{"name":"first"},"kind":"B","metadata":{"name":"second","labels":{"x":"y"}}}`,
		`{"k\u0069nd":"Escaped","metadata":{"n\u0061me":"escaped key","labels":{"a\"b":"q\\"}}}`,
		"{\n\t\"apiVersion\" : \"v1\" ,\n\t\"metadata\" : { \"name\" : \"n\" , \"annotations\" : { \"a\" : \"\\u00e9\\n\" } } ,\n\t\"spec\" : [ 1 , { \"a\" : [ ] } , \"\\\"]}\" ] }\n",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a<b>","labels":{}},"data":{"big":9007199254740993,"f":0.5,"t":true,"n":null,"s":"Zoë \u2028"}}`,
		`{"spec":{"y":"Y_y","list":[[],[{}],{"y":[]}]},"metadata":{"name":"y"}}`,
	}
}

// same as encoding/json reads it.
func equalJSON(t *testing.T, got []byte, want any, what string) {
	t.Helper()
	g, err := reference(string(got))
	if err != nil {
		t.Fatalf("%s: %s is not an object: %v", what, got, err)
	}
	w, err := reference(string(referenceEncode(want)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, got, referenceEncode(want))
	}
}

func TestAnUnchangedObjectIsWrittenAsItCame(t *testing.T) {
	for i, text := range spliceCorpus(t) {
		u, err := FromJSON(text)
		if err != nil {
			t.Fatal(err)
		}
		out, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// As it came unless an object in it repeats or escapes a key
		// (then that object is written again); the bench Pod always.
		whole := u.src != nil && u.src.unchanged(u.Object, 0)
		if i < 3 && !whole {
			t.Errorf("%s: not found unchanged", text)
		}
		if want := strings.TrimSpace(text); whole && string(out) != want {
			t.Errorf("got %s, want %s", out, want)
		}
		equalJSON(t, out, u.Object, text)
	}
}

// mutations change a decoded object the ways plugins do: in place, by
// replacing, adding and deleting members and elements, and by putting a
// value back where it was.
var mutations = []struct {
	name string
	do   func(r *rand.Rand, m map[string]any)
}{
	{"set a label", func(_ *rand.Rand, m map[string]any) { SetNestedField(m, "payments", "metadata", "labels", "team") }},
	{"delete a top-level member", func(r *rand.Rand, m map[string]any) { delete(m, pick(r, m)) }},
	{"replace a member deep down", func(r *rand.Rand, m map[string]any) {
		if c, k := deepMap(r, m); c != nil {
			c[k] = "replaced"
		}
	}},
	{"add a member deep down", func(r *rand.Rand, m map[string]any) {
		if c, _ := deepMap(r, m); c != nil {
			c["added"] = []any{json.Number("1"), map[string]any{"x": nil}}
		}
	}},
	{"delete a member deep down", func(r *rand.Rand, m map[string]any) {
		if c, k := deepMap(r, m); c != nil {
			delete(c, k)
		}
	}},
	{"an equal value, not the same", func(r *rand.Rand, m map[string]any) {
		if c, k := deepMap(r, m); c != nil {
			c[k] = deepCopy(c[k])
		}
	}},
	{"the same value put back", func(r *rand.Rand, m map[string]any) {
		if c, k := deepMap(r, m); c != nil {
			v := c[k]
			delete(c, k)
			c[k] = v
		}
	}},
	{"change an array element", func(r *rand.Rand, m map[string]any) {
		if l := deepList(r, m); len(l) > 0 {
			l[r.Intn(len(l))] = false
		}
	}},
	{"append to an array", func(r *rand.Rand, m map[string]any) {
		walk(m, func(c map[string]any, k string) {
			if l, ok := c[k].([]any); ok && r.Intn(2) == 0 {
				c[k] = append(l, "appended")
			}
		})
	}},
	{"swap two members", func(r *rand.Rand, m map[string]any) {
		if len(m) >= 2 {
			a, b := pick(r, m), pick(r, m)
			m[a], m[b] = m[b], m[a]
		}
	}},
	{"move a subtree", func(r *rand.Rand, m map[string]any) {
		if c, k := deepMap(r, m); c != nil {
			m["moved"] = c[k]
			delete(c, k)
		}
	}},
}

func pick(r *rand.Rand, m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	sortStrings(keys)
	return keys[r.Intn(len(keys))]
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// walk calls f for every member of every object under m (m's too), in a
// fixed order.
func walk(m map[string]any, f func(c map[string]any, k string)) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		f(m, k)
		switch v := m[k].(type) {
		case map[string]any:
			walk(v, f)
		case []any:
			for _, x := range v {
				if c, ok := x.(map[string]any); ok {
					walk(c, f)
				}
			}
		}
	}
}

// deepMap is a random member of a random object under m.
func deepMap(r *rand.Rand, m map[string]any) (map[string]any, string) {
	type at struct {
		c map[string]any
		k string
	}
	var all []at
	walk(m, func(c map[string]any, k string) { all = append(all, at{c, k}) })
	if len(all) == 0 {
		return nil, ""
	}
	a := all[r.Intn(len(all))]
	return a.c, a.k
}

func deepList(r *rand.Rand, m map[string]any) []any {
	var all [][]any
	walk(m, func(c map[string]any, k string) {
		if l, ok := c[k].([]any); ok {
			all = append(all, l)
		}
	})
	if len(all) == 0 {
		return nil
	}
	return all[r.Intn(len(all))]
}

func TestAChangedObjectIsWrittenAsItNowIs(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, text := range spliceCorpus(t) {
		for _, mu := range mutations {
			for round := 0; round < 8; round++ {
				u, err := FromJSON(text)
				if err != nil {
					t.Fatal(err)
				}
				for n := 0; n <= round%3; n++ {
					mu.do(r, u.Object)
				}
				out, err := u.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				equalJSON(t, out, u.Object, fmt.Sprintf("%s, %s", text, mu.name))
			}
		}
	}
}

func TestAReplacedObjectIsWrittenWhole(t *testing.T) {
	u, _ := FromJSON(`{"a":1,"b":{"c":2}}`)
	b := u.Object["b"]
	u.SetUnstructuredContent(map[string]any{"b": b, "d": "new"})
	out, _ := u.MarshalJSON()
	if string(out) != `{"b":{"c":2},"d":"new"}` {
		t.Errorf("got %s", out)
	}
	u, _ = FromJSON(`{"a":1}`)
	u.Object = map[string]any{"z": true}
	if out, _ := u.MarshalJSON(); string(out) != `{"z":true}` {
		t.Errorf("got %s", out)
	}
}

func TestADeepCopyIsWrittenAsItsOriginal(t *testing.T) {
	for _, text := range spliceCorpus(t) {
		u, _ := FromJSON(text)
		c := u.DeepCopy()
		SetNestedField(c.Object, "x", "metadata", "annotations", "copy")
		a, _ := u.MarshalJSON()
		b, _ := c.MarshalJSON()
		equalJSON(t, a, u.Object, text)
		equalJSON(t, b, c.Object, text)
	}
}
