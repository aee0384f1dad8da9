//go:build !wasip1

package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	biav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v1"
)

// backupMain runs backup action `action` on the item at itemPath in the
// Backup at backupPath, as Velero's backup calls a plugin: through
// Velero's BackupItemAction gRPC client and server (Velero's server
// registers its built-in backup actions as v1).
//
// With iterations > 0 the call is then repeated that many times on the same
// client, and the result gains "timing": the median and 99th percentile of
// one call in microseconds (the benchmark's native row: Velero's gRPC
// client and server in one process, so without go-plugin's process hop,
// which Velero's server pays on every call).
func backupMain(action, backupPath, itemPath string, iterations int) {
	backup := &api.Backup{}
	if err := json.Unmarshal(read(backupPath), backup); err != nil {
		fail(fmt.Errorf("%s: %w", backupPath, err))
	}
	item := readItem(itemPath)
	logger := stderrLogger()
	plugin := framework.NewBackupItemActionPlugin(common.ServerLogger(logger), common.ClientLogger(logger))
	client, err := dispense(plugin, backupActions(veleroFactory()), action)
	if err != nil {
		fail(err)
	}
	impl, ok := client.(biav1.BackupItemAction)
	if !ok {
		fail(fmt.Errorf("velero's client for %s is not a BackupItemAction", action))
	}
	out, additional, err := impl.Execute(item, backup)
	result := map[string]any{}
	if err != nil {
		result["error"] = err.Error()
	} else {
		result["item"] = out.UnstructuredContent()
		result["additionalItems"] = identifiers(additional)
	}
	if iterations > 0 && err == nil {
		times := make([]float64, iterations)
		for i := range times {
			start := time.Now()
			if _, _, err := impl.Execute(item.DeepCopy(), backup); err != nil {
				fail(err)
			}
			times[i] = float64(time.Since(start).Nanoseconds()) / 1e3
		}
		slices.Sort(times)
		result["timing"] = map[string]any{
			"calls":        iterations,
			"medianMicros": times[len(times)/2],
			"p99Micros":    times[(len(times)-1)*99/100],
		}
	}
	print(result)
}
