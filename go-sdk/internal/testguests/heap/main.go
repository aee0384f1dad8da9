// Command heap is a hostile test guest, not an example: its execute keeps
// allocating 1 MiB blocks (touched, and kept reachable) until `mib` MiB
// (config; default: without end), then annotates the item with how many it
// held. Unbounded, it runs into the host's memory cap.
package main

import (
	"strconv"

	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

type heap struct{ velero.NoBackupOperations }

var held [][]byte

func (heap) AppliesTo() (velero.ResourceSelector, error) { return velero.ResourceSelector{}, nil }

func (heap) Execute(item *unstructured.Unstructured, _ *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	limit := -1
	if v, ok := host.Config("mib"); ok {
		limit, _ = strconv.Atoi(v)
	}
	held = nil
	for i := 0; limit < 0 || i < limit; i++ {
		block := make([]byte, 1<<20)
		for j := 0; j < len(block); j += 4096 {
			block[j] = 1
		}
		held = append(held, block)
	}
	item.SetAnnotation("heap.iar.test/mib", strconv.Itoa(len(held)))
	return item, nil, "", nil, nil
}

func init() { backupaction.Register(heap{}) }

func main() {}
