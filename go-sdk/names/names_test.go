package names

import "testing"

// The expected names are the Rust SDK's object_name for the same input
// (its algorithm transcribed: FNV-1a over NUL-ended parts, the prefix
// lower-cased to [a-z0-9-], 46 characters at most).
func TestObjectNameIsTheRustSDKs(t *testing.T) {
	for _, c := range []struct {
		prefix string
		parts  []string
		want   string
	}{
		{"data-web-0", []string{"data-web-0", "nightly"}, "data-web-0-714a90445de4685a"},
		{"Weird_Name!", []string{"ab", "c"}, "weird-name-ad22872f536e4705"},
		{"Weird_Name!", []string{"a", "bc"}, "weird-name-401801fc84f3ca79"},
		{"--", nil, "iar-cbf29ce484222325"},
		{"Zoë" + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", []string{"z"}, "zo-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-08f7a407b592e737"},
	} {
		if got := ObjectName(c.prefix, c.parts...); got != c.want {
			t.Errorf("ObjectName(%q, %q) = %q, want %q", c.prefix, c.parts, got, c.want)
		}
	}
}
