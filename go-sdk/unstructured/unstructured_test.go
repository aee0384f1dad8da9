package unstructured

import "testing"

func TestIntegersRoundTripExactly(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a<b>"},"spec":{"big":9007199254740993,"f":0.5}}`
	u, err := FromJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("got %s, want %s", out, in)
	}
}

func TestSetLabelReplacesWhatIsNotAnObject(t *testing.T) {
	u, _ := FromJSON(`{"metadata":{"labels":"not-a-map","annotations":{"kept":"yes"}}}`)
	u.SetLabel("team", "payments")
	u.SetAnnotation("by", "iar")
	if got := u.GetLabels(); len(got) != 1 || got["team"] != "payments" {
		t.Errorf("labels %v", got)
	}
	if got := u.GetAnnotations(); got["kept"] != "yes" || got["by"] != "iar" {
		t.Errorf("annotations %v", got)
	}
}

func TestNotAnObjectIsAnError(t *testing.T) {
	for _, in := range []string{`[1,2,3]`, `{not json`, ``} {
		if _, err := FromJSON(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestNestedAccessors(t *testing.T) {
	u, _ := FromJSON(`{"spec":{"csi":{"driver":"d"},"ready":true,"volumes":[{"name":"v"}]}}`)
	if s, ok := NestedString(u.Object, "spec", "csi", "driver"); !ok || s != "d" {
		t.Errorf("NestedString: %q %v", s, ok)
	}
	if _, ok := NestedString(u.Object, "spec", "ready"); ok {
		t.Error("a bool read as a string")
	}
	if b, ok := NestedBool(u.Object, "spec", "ready"); !ok || !b {
		t.Error("NestedBool")
	}
	SetNestedField(u.Object, "x", "metadata", "annotations", "a")
	if s, _ := NestedString(u.Object, "metadata", "annotations", "a"); s != "x" {
		t.Error("SetNestedField")
	}
	RemoveNestedField(u.Object, "spec", "csi")
	if _, ok := NestedMap(u.Object, "spec", "csi"); ok {
		t.Error("RemoveNestedField")
	}
}
