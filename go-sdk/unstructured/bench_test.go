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
