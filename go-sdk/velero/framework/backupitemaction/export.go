// Package backupitemaction exports the BackupItemAction registered with
// iar.dev/sdk/velero/framework as the contract's interface (through
// iar.dev/sdk/backupaction): import it, for its effect, in the plugin's main
// package. A component exports only the interfaces it imports.
package backupitemaction

import (
	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/velero/framework"
)

func init() { backupaction.Register(framework.BackupItemAction()) }
