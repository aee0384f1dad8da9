// Command spin is a hostile test guest, not an example: its execute starts
// a goroutine that never yields and waits for it. Go on wasm has one
// thread and no preemption, so the goroutine holds the CPU until the
// host's deadline stops the call.
package main

import (
	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

type spin struct{ velero.NoBackupOperations }

var spun uint64

func (spin) AppliesTo() (velero.ResourceSelector, error) { return velero.ResourceSelector{}, nil }

func (spin) Execute(item *unstructured.Unstructured, _ *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	done := make(chan struct{})
	go func() {
		for {
			spun++
		}
	}()
	<-done
	return item, nil, "", nil, nil
}

func init() { backupaction.Register(spin{}) }

func main() {}
