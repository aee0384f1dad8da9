// Command panic is a hostile test guest, not an example: its execute
// dereferences a nil pointer (a Go runtime panic), or with config
// goroutine=true panics in a goroutine, where no recover of the SDK's can
// catch it and Go's runtime exits the instance.
package main

import (
	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

type panicker struct{ velero.NoBackupOperations }

type thing struct{ name string }

var nothing *thing

func (panicker) AppliesTo() (velero.ResourceSelector, error) { return velero.ResourceSelector{}, nil }

func (panicker) Execute(item *unstructured.Unstructured, _ *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	if v, _ := host.Config("goroutine"); v == "true" {
		done := make(chan struct{})
		go func() { panic("a goroutine panicked on purpose") }()
		<-done
	}
	item.SetLabel("name", nothing.name)
	return item, nil, "", nil, nil
}

func init() { backupaction.Register(panicker{}) }

func main() {}
