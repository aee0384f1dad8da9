//go:build !wasip1

package main

import (
	"encoding/json"
	"fmt"

	api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	biav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v1"
)

// backupMain runs backup action `action` on the item at itemPath in the
// Backup at backupPath, as Velero's backup calls a plugin: through
// Velero's BackupItemAction gRPC client and server (Velero's server
// registers its built-in backup actions as v1).
func backupMain(action, backupPath, itemPath string) {
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
	print(result)
}
