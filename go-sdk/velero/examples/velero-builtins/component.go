//go:build wasip1

package main

import (
	"iar.dev/sdk/velero/framework"
	_ "iar.dev/sdk/velero/framework/backupitemaction" // exports item-action
	"iar.dev/sdk/velero/framework/clientfactory"
	_ "iar.dev/sdk/velero/framework/restoreitemaction" // exports restore-item-action
)

// Velero's main, as a component runs it: a component runs its package
// initializers and never main. The plugin setting `action` names which of
// the registered actions a plugin runs (velero.io/service, ...). The
// clients come from iar's factory, over the host, where Velero's main
// builds client.NewFactory over a kubeconfig.
func init() {
	f := clientfactory.New()
	framework.NewServer().
		RegisterBackupItemActions(backupActions(f)).
		RegisterRestoreItemActions(restoreActions(f)).
		Serve()
}

func main() {}
