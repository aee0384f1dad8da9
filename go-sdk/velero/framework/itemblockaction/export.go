// Package itemblockaction exports the ItemBlockAction registered with
// iar.dev/sdk/velero/framework as the contract's interface (through
// iar.dev/sdk/blockaction): import it, for its effect, in the plugin's main
// package. A component exports only the interfaces it imports.
package itemblockaction

import (
	"iar.dev/sdk/blockaction"
	"iar.dev/sdk/velero/framework"
)

func init() { blockaction.Register(framework.ItemBlockAction()) }
