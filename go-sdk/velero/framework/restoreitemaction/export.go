// Package restoreitemaction exports the RestoreItemAction registered with
// iar.dev/sdk/velero/framework as the contract's interface (through
// iar.dev/sdk/restoreaction): import it, for its effect, in the plugin's main
// package. A component exports only the interfaces it imports.
package restoreitemaction

import (
	"iar.dev/sdk/restoreaction"
	"iar.dev/sdk/velero/framework"
)

func init() { restoreaction.Register(framework.RestoreItemAction()) }
