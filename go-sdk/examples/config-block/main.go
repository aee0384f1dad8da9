// Command config-block is plugins/config-block in Go, through the SDK: an
// ItemBlockAction keeping a Pod in one item block with the ConfigMaps it
// reads (mounted as volumes, loaded with envFrom, or named in the
// annotation iar.dev/related-configmaps, comma-separated; config
// annotation renames it). It passes the Rust plugin's test file unchanged.
package main

import (
	"strings"

	"iar.dev/sdk/blockaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

const annotation = "iar.dev/related-configmaps"

type configBlock struct{}

func init() { blockaction.Register(configBlock{}) }

func main() {}

func (configBlock) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"pods"}}, nil
}

// namesAt is the string at path in each object of the list at list.
func namesAt(obj map[string]any, list []string, path ...string) []string {
	entries, _ := unstructured.NestedSlice(obj, list...)
	var out []string
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok {
			if s, ok := unstructured.NestedString(m, path...); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func (configBlock) GetRelatedItems(item *unstructured.Unstructured, _ *velero.Backup) ([]velero.ResourceIdentifier, error) {
	names := namesAt(item.Object, []string{"spec", "volumes"}, "configMap", "name")
	containers, _ := unstructured.NestedSlice(item.Object, "spec", "containers")
	for _, c := range containers {
		if m, ok := c.(map[string]any); ok {
			names = append(names, namesAt(m, []string{"envFrom"}, "configMapRef", "name")...)
		}
	}
	if list, ok := item.GetAnnotations()[host.ConfigOr("annotation", annotation)]; ok {
		for _, n := range strings.Split(list, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	var related []velero.ResourceIdentifier
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		related = append(related, velero.ResourceIdentifier{
			GroupResource: velero.GroupResource{Resource: "configmaps"},
			Namespace:     item.GetNamespace(),
			Name:          n,
		})
	}
	return related, nil
}
