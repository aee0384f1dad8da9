// Command catalog is a test guest, not an example: its execute asks the
// host's cluster-catalog (contract 1.4.0) and returns the item annotated
// with what it got: iar.test/catalog = {"count": <resources>, "pods":
// <the pods row>, "version": <git version or "error:<message>">, "home":
// <home namespace>}.
package main

import (
	"encoding/json"

	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

type catalog struct{ velero.NoBackupOperations }

func (catalog) AppliesTo() (velero.ResourceSelector, error) { return velero.ResourceSelector{}, nil }

func (catalog) Execute(item *unstructured.Unstructured, _ *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	seen := map[string]any{"home": host.HomeNamespace()}
	rows, err := host.Resources()
	if err != nil {
		return nil, nil, "", nil, err
	}
	seen["count"] = len(rows)
	for _, r := range rows {
		if r.Group == "" && r.Resource == "pods" {
			seen["pods"] = r
		}
	}
	if v, err := host.ServerVersion(); err != nil {
		seen["version"] = "error:" + err.Error()
	} else {
		seen["version"] = v.GitVersion
	}
	text, err := json.Marshal(seen)
	if err != nil {
		return nil, nil, "", nil, err
	}
	item.SetAnnotations(map[string]string{"iar.test/catalog": string(text)})
	return item, nil, "", nil, nil
}

func init() { backupaction.Register(catalog{}) }

func main() {}
