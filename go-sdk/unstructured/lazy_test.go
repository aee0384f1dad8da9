package unstructured

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

// The methods plugins call, in sequences: each is run on an item read by
// FromJSON and on one read by FromJSONLazy, which must agree on every
// answer and on the JSON written.
var methodSteps = []struct {
	name string
	do   func(u *Unstructured) any
}{
	{"GetAPIVersion", func(u *Unstructured) any { return u.GetAPIVersion() }},
	{"GetKind", func(u *Unstructured) any { return u.GetKind() }},
	{"GetName", func(u *Unstructured) any { return u.GetName() }},
	{"GetNamespace", func(u *Unstructured) any { return u.GetNamespace() }},
	{"GetUID", func(u *Unstructured) any { return u.GetUID() }},
	{"GetLabels", func(u *Unstructured) any { return u.GetLabels() }},
	{"GetAnnotations", func(u *Unstructured) any { return u.GetAnnotations() }},
	{"SetLabel", func(u *Unstructured) any { u.SetLabel("team", "payments"); return nil }},
	{"SetLabel again", func(u *Unstructured) any { u.SetLabel("app", "changed"); return nil }},
	{"SetAnnotation", func(u *Unstructured) any { u.SetAnnotation("iar.dev/by", "Zoë <&>"); return nil }},
	{"SetLabels", func(u *Unstructured) any { u.SetLabels(map[string]string{"only": "this"}); return nil }},
	{"SetLabels(nil)", func(u *Unstructured) any { u.SetLabels(nil); return nil }},
	{"SetAnnotations(nil)", func(u *Unstructured) any { u.SetAnnotations(nil); return nil }},
	{"SetName", func(u *Unstructured) any { u.SetName("renamed"); return nil }},
	{"SetNamespace", func(u *Unstructured) any { u.SetNamespace("elsewhere"); return nil }},
	{"MarshalJSON", func(u *Unstructured) any {
		b, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		v, err := reference(string(b))
		if err != nil {
			return fmt.Errorf("%s: %v", b, err)
		}
		return v
	}},
}

func TestLazyItemsAnswerAsDecodedOnes(t *testing.T) {
	corpus := append(spliceCorpus(t),
		`{"kind":"A","metadata":{"n\u0061me":"escaped in metadata","labels":{"a":"1"}}}`,
		`{"kind":"A","spec":{"x":1}}`,
		`{"metadata":{"labels":{"a":"1"}},"metadata":"repeated, not an object"}`,
	)
	for _, text := range corpus {
		// Every pair of steps, and every step after each of three
		// setters, then the JSON written and Object.
		var runs [][]int
		for i := range methodSteps {
			for j := range methodSteps {
				runs = append(runs, []int{i, j})
			}
		}
		for i := 7; i < len(methodSteps)-1; i++ {
			for j := range methodSteps {
				runs = append(runs, []int{7, i, j, len(methodSteps) - 1})
			}
		}
		for _, run := range runs {
			eager, err := FromJSON(text)
			if err != nil {
				t.Fatal(err)
			}
			lazy, err := FromJSONLazy(text)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range run {
				step := methodSteps[s]
				names = append(names, step.name)
				want, got := step.do(eager), step.do(lazy)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s: lazy %#v, decoded %#v", text, strings.Join(names, ", "), got, want)
				}
			}
			// Decoded in the end, the lazy item is the decoded one.
			if got := lazy.UnstructuredContent(); !reflect.DeepEqual(got, eager.Object) {
				t.Errorf("%s: %s: Object %#v, want %#v", text, strings.Join(names, ", "), got, eager.Object)
			}
			SetNestedField(lazy.Object, "after", "metadata", "labels", "decoded")
			SetNestedField(eager.Object, "after", "metadata", "labels", "decoded")
			a, _ := lazy.MarshalJSON()
			b, _ := eager.MarshalJSON()
			equalJSON(t, a, eager.Object, text)
			equalJSON(t, b, eager.Object, text)
		}
	}
}

func TestALazyItemReadOnlyIsWrittenAsItCame(t *testing.T) {
	for i, text := range spliceCorpus(t) {
		u, err := FromJSONLazy(text)
		if err != nil {
			t.Fatal(err)
		}
		if u.lazy == nil {
			if i < 3 {
				t.Errorf("%s: not skimmed", text)
			}
			continue // not skimmed: decoded, as FromJSON
		}
		u.GetKind()
		u.GetName()
		u.GetLabels()
		u.GetAnnotations()
		out, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSpace(text); string(out) != want {
			t.Errorf("got %s, want %s", out, want)
		}
		if u.Object != nil {
			t.Error("Object decoded by the accessors")
		}
	}
}

// A labelled item keeps the bytes of everything but its labels: spec and
// status as they came, spacing and all.
func TestALabelledItemKeepsTheRestAsItCame(t *testing.T) {
	pod := spliceCorpus(t)[0]
	at := strings.Index(pod, `"spec": `) + len(`"spec": `)
	spec := pod[at : at+skipValue(pod[at:], 0)]
	for _, read := range []func(string) (*Unstructured, error){FromJSON, FromJSONLazy} {
		u, _ := read(pod)
		u.SetLabel("team", "payments")
		out, _ := u.MarshalJSON()
		if !strings.Contains(string(out), spec) {
			t.Errorf("the spec was written anew:\n%s", out)
		}
		if !strings.Contains(string(out), `"team":"payments"`) {
			t.Errorf("no label: %s", out)
		}
	}
}

func TestWhatASkimCannotReadIsDecoded(t *testing.T) {
	for _, text := range []string{`{"k\u0069nd":"A"}`, `{"a":1}x`, `{"a" 1}`, `[]`} {
		u, err := FromJSONLazy(text)
		_, want := FromJSON(text)
		if (err == nil) != (want == nil) {
			t.Errorf("%s: error %v, FromJSON's %v", text, err, want)
		}
		if err == nil && u.lazy != nil {
			t.Errorf("%s: skimmed", text)
		}
	}
}

func TestSkippingFindsWhereValuesEnd(t *testing.T) {
	for _, c := range []struct{ text, rest string }{
		{`"abc"`, ``},
		{`"a\"b\\"x`, `x`},
		{`"\\\\"x`, `x`},
		{`"a long string without escapes, longer than a word"y`, `y`},
		{`{"a":"}]","b":[1,{"c":"\"{"}],"d":{}}z`, `z`},
		{`[["Y_y"],{"y":"_"}]!`, `!`},
		{`123,`, `,`},
		{`true}`, `}`},
	} {
		end := skipValue(c.text, 0)
		if end < 0 || c.text[end:] != c.rest {
			t.Errorf("%s: ends at %d", c.text, end)
		}
	}
	for _, text := range []string{`"abc`, `{"a":[}`, `{"a":"}`, `[`} {
		if end := skipValue(text, 0); end >= 0 {
			t.Errorf("%s: ends at %d", text, end)
		}
	}
}

func TestObjectSetOnALazyItemIsWhatIsWritten(t *testing.T) {
	u, _ := FromJSONLazy(`{"kind":"A","metadata":{"name":"n"}}`)
	u.SetLabel("a", "b")
	u.Object = map[string]any{"kind": "B"}
	if out, _ := u.MarshalJSON(); string(out) != `{"kind":"B"}` {
		t.Errorf("got %s", out)
	}
	if u.GetKind() != "B" || u.GetName() != "" {
		t.Errorf("kind %q, name %q", u.GetKind(), u.GetName())
	}
}

// Random objects, written with random spacing and escapes, so that
// quotes, backslashes and brackets fall at every offset of the skim's
// eight-byte words: the lazy item reads and writes them as a decoded one.
func TestLazyItemsOfRandomObjects(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	skimmed := 0
	defer func() {
		if skimmed < 1000 {
			t.Errorf("only %d of 3000 skimmed", skimmed)
		}
	}()
	for n := 0; n < 3000; n++ {
		obj := randomObject(r, 0)
		if r.Intn(2) == 0 {
			meta := randomObject(r, 2)
			if r.Intn(2) == 0 {
				meta["labels"] = randomObject(r, 3)
			}
			obj["metadata"] = meta
		}
		var b strings.Builder
		writeRandomly(r, &b, obj)
		text := b.String()
		eager, err := FromJSON(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		lazy, err := FromJSONLazy(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if lazy.lazy != nil {
			skimmed++
		}
		if got, want := lazy.GetName(), eager.GetName(); got != want {
			t.Fatalf("%s: name %q, want %q", text, got, want)
		}
		if got, want := lazy.GetLabels(), eager.GetLabels(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: labels %v, want %v", text, got, want)
		}
		if r.Intn(2) == 0 {
			eager.SetLabel("team", "payments")
			lazy.SetLabel("team", "payments")
		}
		a, _ := lazy.MarshalJSON()
		equalJSON(t, a, eager.Object, text)
		if got := lazy.UnstructuredContent(); !reflect.DeepEqual(got, eager.Object) {
			t.Fatalf("%s: Object %#v, want %#v", text, got, eager.Object)
		}
	}
}

const (
	randomChars = "ab\"\\/{}[]:, \n\té\u2028"
	plainChars  = "abcYy_/{}[]:, é"
)

func randomString(r *rand.Rand) string {
	chars := []rune(randomChars)
	if r.Intn(5) > 0 {
		chars = []rune(plainChars)
	}
	n := r.Intn(20)
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(chars[r.Intn(len(chars))])
	}
	return b.String()
}

func randomValue(r *rand.Rand, depth int) any {
	switch k := r.Intn(8); {
	case k == 0 && depth < 4:
		return randomObject(r, depth+1)
	case k == 1 && depth < 4:
		l := make([]any, r.Intn(4))
		for i := range l {
			l[i] = randomValue(r, depth+1)
		}
		return l
	case k == 2:
		return json.Number(fmt.Sprint(r.Intn(2000) - 1000))
	case k == 3:
		return r.Intn(2) == 0
	case k == 4:
		return nil
	default:
		return randomString(r)
	}
}

func randomObject(r *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for i := r.Intn(6); i > 0; i-- {
		k := randomString(r)
		if r.Intn(3) == 0 {
			k = []string{"name", "kind", "apiVersion", "labels", "spec"}[r.Intn(5)]
		}
		m[k] = randomValue(r, depth)
	}
	return m
}

// writeRandomly writes v as JSON with random spacing and, at random,
// characters escaped that need not be (\/, \u00e9).
func writeRandomly(r *rand.Rand, b *strings.Builder, v any) {
	space := func() {
		b.WriteString([]string{"", "", " ", "\n  ", "\t"}[r.Intn(5)])
	}
	switch v := v.(type) {
	case map[string]any:
		b.WriteByte('{')
		first := true
		for _, k := range sortedKeys(v) {
			if !first {
				b.WriteByte(',')
			}
			first = false
			space()
			writeRandomly(r, b, k)
			space()
			b.WriteByte(':')
			space()
			writeRandomly(r, b, v[k])
			space()
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			space()
			writeRandomly(r, b, x)
		}
		b.WriteByte(']')
	case string:
		enc := string(referenceEncode(v))
		if r.Intn(3) == 0 {
			enc = strings.ReplaceAll(enc, "/", `\/`)
			enc = strings.ReplaceAll(enc, "é", `\u00e9`)
		}
		b.WriteString(enc)
	default:
		b.Write(referenceEncode(v))
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	return keys
}
