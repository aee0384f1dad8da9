// Package restoreaction exports a velero.RestoreItemActionV2 as the
// contract's restore-item-action interface
// (iar:plugin/restore-item-action@1.4.0): importing it makes the plugin a
// restore item action.
package restoreaction

import (
	"errors"

	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/internal/wire"
	"iar.dev/sdk/velero"
)

var action velero.RestoreItemActionV2

// Register makes a the plugin's restore item action (from init()).
func Register(a velero.RestoreItemActionV2) { action = a }

func registered() error {
	if action == nil {
		return errors.New("no restore item action registered: call restoreaction.Register in init()")
	}
	return nil
}

//go:wasmexport iar:plugin/restore-item-action@1.4.0#applies-to
func appliesTo() uint32 {
	return wire.AppliesTo(registered, func() (velero.ResourceSelector, error) { return action.AppliesTo() })
}

//go:wasmexport cabi_post_iar:plugin/restore-item-action@1.4.0#applies-to
func postAppliesTo(uint32) { cabi.Release() }

// execute(restore-input): result<restore-output, action-error>, payload at
// 8 (item 8, additional-items 20, skip-restore 28, operation-id 32,
// wait-for-additional-items 44, the timeout option<u64> 48).
//
//go:wasmexport iar:plugin/restore-item-action@1.4.0#execute
func execute(ip, in, bp, bn, np, nn, sp, sn, up, un, jp, jn uint32) uint32 {
	item, _, itemErr := wire.Item(ip, in, action)
	fromBackup, _, fromErr := wire.Item(bp, bn, action)
	restore, restoreErr := wire.Restore(np, nn, sp, sn, up, un, jp, jn)
	cabi.Release()
	return wire.Result(64, 8, func(ret cabi.Area) error {
		if err := errors.Join(registered(), itemErr, fromErr, restoreErr); err != nil {
			return err
		}
		out, err := action.Execute(&velero.RestoreItemActionExecuteInput{
			Item: item, ItemFromBackup: fromBackup, Restore: restore,
		})
		if err != nil {
			return err
		}
		if out == nil {
			return nil
		}
		changed, err := wire.Changed(out.UpdatedItem)
		if err != nil {
			return err
		}
		ret.SetOptStr(8, changed)
		wire.SetIDs(ret, 20, out.AdditionalItems)
		ret.SetBool(28, out.SkipRestore)
		if out.OperationID != "" {
			ret.SetOptStr(32, &out.OperationID)
		}
		ret.SetBool(44, out.WaitForAdditionalItems)
		if out.AdditionalItemsReadyTimeout > 0 {
			ret.SetU8(48, 1)
			ret.SetU64(56, uint64(out.AdditionalItemsReadyTimeout.Milliseconds()))
		}
		return nil
	})
}

//go:wasmexport cabi_post_iar:plugin/restore-item-action@1.4.0#execute
func postExecute(uint32) { cabi.Release() }

//go:wasmexport iar:plugin/restore-item-action@1.4.0#progress
func progress(op, on, np, nn, sp, sn, up, un, jp, jn uint32) uint32 {
	id := cabi.String(op, on)
	restore, restoreErr := wire.Restore(np, nn, sp, sn, up, un, jp, jn)
	cabi.Release()
	return wire.Result(104, 8, func(ret cabi.Area) error {
		if err := errors.Join(registered(), restoreErr); err != nil {
			return err
		}
		p, err := action.Progress(id, restore)
		if err == nil {
			wire.SetProgress(ret, 8, p)
		}
		return err
	})
}

//go:wasmexport cabi_post_iar:plugin/restore-item-action@1.4.0#progress
func postProgress(uint32) { cabi.Release() }

//go:wasmexport iar:plugin/restore-item-action@1.4.0#cancel
func cancel(op, on, np, nn, sp, sn, up, un, jp, jn uint32) uint32 {
	id := cabi.String(op, on)
	restore, restoreErr := wire.Restore(np, nn, sp, sn, up, un, jp, jn)
	cabi.Release()
	return wire.Result(16, 4, func(cabi.Area) error {
		if err := errors.Join(registered(), restoreErr); err != nil {
			return err
		}
		return action.Cancel(id, restore)
	})
}

//go:wasmexport cabi_post_iar:plugin/restore-item-action@1.4.0#cancel
func postCancel(uint32) { cabi.Release() }

// are-additional-items-ready(ids, restore): result<bool, action-error>,
// payload at 4.
//
//go:wasmexport iar:plugin/restore-item-action@1.4.0#are-additional-items-ready
func areAdditionalItemsReady(lp, ln, np, nn, sp, sn, up, un, jp, jn uint32) uint32 {
	ids := wire.IDs(lp, ln)
	restore, restoreErr := wire.Restore(np, nn, sp, sn, up, un, jp, jn)
	cabi.Release()
	return wire.Result(16, 4, func(ret cabi.Area) error {
		if err := errors.Join(registered(), restoreErr); err != nil {
			return err
		}
		ready, err := action.AreAdditionalItemsReady(ids, restore)
		if err == nil {
			ret.SetBool(4, ready)
		}
		return err
	})
}

//go:wasmexport cabi_post_iar:plugin/restore-item-action@1.4.0#are-additional-items-ready
func postAreAdditionalItemsReady(uint32) { cabi.Release() }
