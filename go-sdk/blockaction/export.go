// Package blockaction exports a velero.ItemBlockAction as the contract's
// item-block-action interface (iar:plugin/item-block-action@1.4.0):
// importing it makes the plugin an item block action.
package blockaction

import (
	"errors"

	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/internal/wire"
	"iar.dev/sdk/velero"
)

var action velero.ItemBlockAction

// Register makes a the plugin's item block action (from init()).
func Register(a velero.ItemBlockAction) { action = a }

func registered() error {
	if action == nil {
		return errors.New("no item block action registered: call blockaction.Register in init()")
	}
	return nil
}

//go:wasmexport iar:plugin/item-block-action@1.4.0#applies-to
func appliesTo() uint32 {
	return wire.AppliesTo(registered, func() (velero.ResourceSelector, error) { return action.AppliesTo() })
}

//go:wasmexport cabi_post_iar:plugin/item-block-action@1.4.0#applies-to
func postAppliesTo(uint32) { cabi.Release() }

// get-related-items(item, backup): result<list<resource-identifier>,
// action-error>, payload at 4.
//
//go:wasmexport iar:plugin/item-block-action@1.4.0#get-related-items
func getRelatedItems(ip, in, np, nn, sp, sn, up, un, jp, jn, phase uint32) uint32 {
	item, _, itemErr := wire.Item(ip, in, action)
	backup, backupErr := wire.Backup(np, nn, sp, sn, up, un, jp, jn, phase)
	cabi.Release()
	return wire.Result(16, 4, func(ret cabi.Area) error {
		if err := errors.Join(registered(), itemErr, backupErr); err != nil {
			return err
		}
		ids, err := action.GetRelatedItems(item, backup)
		if err == nil {
			wire.SetIDs(ret, 4, ids)
		}
		return err
	})
}

//go:wasmexport cabi_post_iar:plugin/item-block-action@1.4.0#get-related-items
func postGetRelatedItems(uint32) { cabi.Release() }
