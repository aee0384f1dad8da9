// Package backupaction exports a velero.BackupItemActionV2 as the
// contract's item-action interface (iar:plugin/item-action@1.4.0).
// Importing this package is what makes a plugin a backup item action:
// its exports are linked in, and `iar componentize` puts item-action in
// the component's world.
package backupaction

import (
	"errors"

	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/internal/wire"
	"iar.dev/sdk/velero"
)

var action velero.BackupItemActionV2

// Register makes a the plugin's backup item action. Call it from init():
// a component runs its package initialisers when it is instantiated, and
// never main.
func Register(a velero.BackupItemActionV2) { action = a }

func registered() error {
	if action == nil {
		return errors.New("no backup item action registered: call backupaction.Register in init()")
	}
	return nil
}

// applies-to: result<resource-selector, action-error>, payload at 4.
//
//go:wasmexport iar:plugin/item-action@1.4.0#applies-to
func appliesTo() uint32 {
	return wire.AppliesTo(registered, func() (velero.ResourceSelector, error) { return action.AppliesTo() })
}

//go:wasmexport cabi_post_iar:plugin/item-action@1.4.0#applies-to
func postAppliesTo(uint32) { cabi.Release() }

// execute(item, backup): result<execute-output, action-error>, payload at 4
// (item option<string> 4, additional-items 16, operation-id 24,
// post-operation-items 36).
//
//go:wasmexport iar:plugin/item-action@1.4.0#execute
func execute(ip, in, np, nn, sp, sn, up, un, jp, jn, phase uint32) uint32 {
	item, _, itemErr := wire.Item(ip, in, action)
	backup, backupErr := wire.Backup(np, nn, sp, sn, up, un, jp, jn, phase)
	cabi.Release()
	return wire.Result(44, 4, func(ret cabi.Area) error {
		if err := errors.Join(registered(), itemErr, backupErr); err != nil {
			return err
		}
		out, additional, operationID, postItems, err := action.Execute(item, backup)
		if err != nil {
			return err
		}
		changed, err := wire.Changed(out)
		if err != nil {
			return err
		}
		ret.SetOptStr(4, changed)
		wire.SetIDs(ret, 16, additional)
		if operationID != "" {
			ret.SetOptStr(24, &operationID)
		}
		wire.SetIDs(ret, 36, postItems)
		return nil
	})
}

//go:wasmexport cabi_post_iar:plugin/item-action@1.4.0#execute
func postExecute(uint32) { cabi.Release() }

// progress(operation-id, backup): result<operation-progress, action-error>,
// payload at 8 (operation-progress is 8-aligned).
//
//go:wasmexport iar:plugin/item-action@1.4.0#progress
func progress(op, on, np, nn, sp, sn, up, un, jp, jn, phase uint32) uint32 {
	id := cabi.String(op, on)
	backup, backupErr := wire.Backup(np, nn, sp, sn, up, un, jp, jn, phase)
	cabi.Release()
	return wire.Result(104, 8, func(ret cabi.Area) error {
		if err := errors.Join(registered(), backupErr); err != nil {
			return err
		}
		p, err := action.Progress(id, backup)
		if err == nil {
			wire.SetProgress(ret, 8, p)
		}
		return err
	})
}

//go:wasmexport cabi_post_iar:plugin/item-action@1.4.0#progress
func postProgress(uint32) { cabi.Release() }

// cancel(operation-id, backup): result<_, action-error>, payload at 4.
//
//go:wasmexport iar:plugin/item-action@1.4.0#cancel
func cancel(op, on, np, nn, sp, sn, up, un, jp, jn, phase uint32) uint32 {
	id := cabi.String(op, on)
	backup, backupErr := wire.Backup(np, nn, sp, sn, up, un, jp, jn, phase)
	cabi.Release()
	return wire.Result(16, 4, func(cabi.Area) error {
		if err := errors.Join(registered(), backupErr); err != nil {
			return err
		}
		return action.Cancel(id, backup)
	})
}

//go:wasmexport cabi_post_iar:plugin/item-action@1.4.0#cancel
func postCancel(uint32) { cabi.Release() }
