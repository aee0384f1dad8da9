package unstructured

import (
	"os"
	"testing"
)

var podJSON = func() string {
	b, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func BenchmarkFromJSON(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := FromJSON(podJSON); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshal(b *testing.B) {
	u, _ := FromJSON(podJSON)
	for i := 0; i < b.N; i++ {
		if _, err := u.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// The bench Pod (examples/bench/pod.json, 4.7 KB), as the labels plugin
// reads it: decoded (FromJSON) or skimmed (FromJSONLazy).
var bigPod = func() string {
	b, err := os.ReadFile("../../examples/bench/pod.json")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func BenchmarkBigFromJSON(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := FromJSON(bigPod); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBigMarshal(b *testing.B) {
	b.ReportAllocs()
	u, _ := FromJSON(bigPod)
	for i := 0; i < b.N; i++ {
		if _, err := u.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBigLabelsCall(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		u, err := FromJSON(bigPod)
		if err != nil {
			b.Fatal(err)
		}
		u.SetLabel("team", "payments")
		_ = u.GetKind()
		_ = u.GetName()
		if _, err := u.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBigLazySkim(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := FromJSONLazy(bigPod); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBigLazyGetName(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		u, _ := FromJSONLazy(bigPod)
		_ = u.GetName()
	}
}

func BenchmarkBigLazyLabelsCall(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		u, err := FromJSONLazy(bigPod)
		if err != nil {
			b.Fatal(err)
		}
		u.SetLabel("team", "payments")
		_ = u.GetKind()
		_ = u.GetName()
		if _, err := u.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}
