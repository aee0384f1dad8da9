//go:build wasip1

package main

import (
	"iar.dev/sdk/velero/framework"
	_ "iar.dev/sdk/velero/framework/restoreitemaction" // exports restore-item-action
)

// Velero's main, as a component runs it: a component runs its package
// initializers and never main. The plugin setting `action` names which of
// the registered actions a plugin runs (velero.io/service, ...).
func init() {
	framework.NewServer().
		RegisterRestoreItemActions(restoreActions).
		Serve()
}

func main() {}
