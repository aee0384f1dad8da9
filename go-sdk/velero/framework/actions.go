package framework

import (
	"fmt"

	vplugin "github.com/vmware-tanzu/velero/pkg/plugin/velero"
	biav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v1"
	biav2 "github.com/vmware-tanzu/velero/pkg/plugin/velero/backupitemaction/v2"
	ibav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/itemblockaction/v1"
	riav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/restoreitemaction/v1"
	riav2 "github.com/vmware-tanzu/velero/pkg/plugin/velero/restoreitemaction/v2"
	"k8s.io/apimachinery/pkg/runtime"

	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// The adapters below are the SDK's interfaces (iar.dev/sdk/velero) over
// the action registered here; the export packages register them with
// iar.dev/sdk's backupaction, restoreaction and blockaction. Each
// declares velero.ItemsThroughMethods: it reads the SDK's item only as
// text (MarshalJSON), so the SDK skims it instead of decoding it.

// BackupItemAction is the registered backup item action (v1 or v2) as
// the SDK's velero.BackupItemActionV2; v1 actions are adapted as Velero
// adapts them (no operation id; Progress answers Velero's "does not
// support asynchronous operations", as an unknown operation; Cancel
// does nothing).
func BackupItemAction() velero.BackupItemActionV2 { return &backupAdapter{instance{k: backupKind}} }

// RestoreItemAction is the registered restore item action (v1 or v2)
// as the SDK's velero.RestoreItemActionV2; v1 actions as Velero adapts
// them (additional items always ready).
func RestoreItemAction() velero.RestoreItemActionV2 { return &restoreAdapter{instance{k: restoreKind}} }

// ItemBlockAction is the registered item block action as the SDK's.
func ItemBlockAction() velero.ItemBlockAction { return &blockAdapter{instance{k: blockKind}} }

type backupAdapter struct{ in instance }

func (*backupAdapter) ItemsThroughMethods() {}

// appliesTo is what every version of every action has.
type appliesTo interface {
	AppliesTo() (vplugin.ResourceSelector, error)
}

// impl is the registered action: a v1 action (v2 nil) or a v2 one (v1
// nil), and its AppliesTo either way.
func (a *backupAdapter) impl() (appliesTo, biav1.BackupItemAction, biav2.BackupItemAction, error) {
	impl, err := a.in.get()
	if err != nil {
		return nil, nil, nil, err
	}
	if a.in.v1 {
		v1, ok := impl.(biav1.BackupItemAction)
		if !ok {
			return nil, nil, nil, fmt.Errorf("plugin %s: %T is not a BackupItemAction", a.in.name, impl)
		}
		return v1, v1, nil, nil
	}
	v2, ok := impl.(biav2.BackupItemAction)
	if !ok {
		return nil, nil, nil, fmt.Errorf("plugin %s: %T is not a BackupItemActionV2", a.in.name, impl)
	}
	return v2, nil, v2, nil
}

func (a *backupAdapter) AppliesTo() (velero.ResourceSelector, error) {
	if a.in.namedElsewhere() {
		return nothing, nil
	}
	act, _, _, err := a.impl()
	if err != nil {
		return velero.ResourceSelector{}, err
	}
	s, err := act.AppliesTo()
	return selector(s), err
}

func (a *backupAdapter) Execute(in *unstructured.Unstructured, b *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	_, v1, v2, err := a.impl()
	if err != nil {
		return nil, nil, "", nil, err
	}
	it, err := item(in)
	if err != nil {
		return nil, nil, "", nil, err
	}
	bk, err := backup(b)
	if err != nil {
		return nil, nil, "", nil, err
	}
	var (
		out                 runtime.Unstructured
		additional, postOps []vplugin.ResourceIdentifier
		operationID         string
	)
	if v2 != nil {
		out, additional, operationID, postOps, err = v2.Execute(it, bk)
	} else {
		out, additional, err = v1.Execute(it, bk)
	}
	if err != nil {
		return nil, nil, "", nil, err
	}
	changed, err := returned(out)
	if err != nil {
		return nil, nil, "", nil, err
	}
	return changed, ids(additional), operationID, ids(postOps), nil
}

func (a *backupAdapter) Progress(id string, b *velero.Backup) (velero.OperationProgress, error) {
	_, _, v2, err := a.impl()
	if err != nil {
		return velero.OperationProgress{}, err
	}
	if v2 == nil {
		return velero.OperationProgress{}, velero.UnknownOperation(biav2.AsyncOperationsNotSupportedError())
	}
	bk, err := backup(b)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	p, err := v2.Progress(id, bk)
	return progress(p), err
}

func (a *backupAdapter) Cancel(id string, b *velero.Backup) error {
	_, _, v2, err := a.impl()
	if err != nil || v2 == nil {
		return err
	}
	bk, err := backup(b)
	if err != nil {
		return err
	}
	return v2.Cancel(id, bk)
}

type restoreAdapter struct{ in instance }

func (*restoreAdapter) ItemsThroughMethods() {}

func (a *restoreAdapter) impl() (riav1.RestoreItemAction, riav2.RestoreItemAction, error) {
	impl, err := a.in.get()
	if err != nil {
		return nil, nil, err
	}
	if a.in.v1 {
		v1, ok := impl.(riav1.RestoreItemAction)
		if !ok {
			return nil, nil, fmt.Errorf("plugin %s: %T is not a RestoreItemAction", a.in.name, impl)
		}
		return v1, nil, nil
	}
	v2, ok := impl.(riav2.RestoreItemAction)
	if !ok {
		return nil, nil, fmt.Errorf("plugin %s: %T is not a RestoreItemActionV2", a.in.name, impl)
	}
	return v2, v2, nil
}

func (a *restoreAdapter) AppliesTo() (velero.ResourceSelector, error) {
	if a.in.namedElsewhere() {
		return nothing, nil
	}
	v1, _, err := a.impl()
	if err != nil {
		return velero.ResourceSelector{}, err
	}
	s, err := v1.AppliesTo()
	return selector(s), err
}

func (a *restoreAdapter) Execute(input *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	v1, _, err := a.impl()
	if err != nil {
		return nil, err
	}
	it, err := item(input.Item)
	if err != nil {
		return nil, err
	}
	fromBackup, err := item(input.ItemFromBackup)
	if err != nil {
		return nil, err
	}
	r, err := restore(input.Restore)
	if err != nil {
		return nil, err
	}
	// v1 and v2 share Execute's signature.
	out, err := v1.Execute(&vplugin.RestoreItemActionExecuteInput{Item: it, ItemFromBackup: fromBackup, Restore: r})
	if err != nil {
		return nil, err
	}
	if out == nil {
		// Velero's server would fail on a nil output (it reads
		// UpdatedItem): say so rather than restore the item unchanged.
		return nil, fmt.Errorf("plugin %s: Execute returned neither an output nor an error", a.in.name)
	}
	changed, err := returned(out.UpdatedItem)
	if err != nil {
		return nil, err
	}
	return &velero.RestoreItemActionExecuteOutput{
		UpdatedItem:                 changed,
		AdditionalItems:             ids(out.AdditionalItems),
		SkipRestore:                 out.SkipRestore,
		OperationID:                 out.OperationID,
		WaitForAdditionalItems:      out.WaitForAdditionalItems,
		AdditionalItemsReadyTimeout: out.AdditionalItemsReadyTimeout,
	}, nil
}

func (a *restoreAdapter) Progress(id string, rs *velero.Restore) (velero.OperationProgress, error) {
	_, v2, err := a.impl()
	if err != nil {
		return velero.OperationProgress{}, err
	}
	if v2 == nil {
		return velero.OperationProgress{}, velero.UnknownOperation(riav2.AsyncOperationsNotSupportedError())
	}
	r, err := restore(rs)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	p, err := v2.Progress(id, r)
	return progress(p), err
}

func (a *restoreAdapter) Cancel(id string, rs *velero.Restore) error {
	_, v2, err := a.impl()
	if err != nil || v2 == nil {
		return err
	}
	r, err := restore(rs)
	if err != nil {
		return err
	}
	return v2.Cancel(id, r)
}

func (a *restoreAdapter) AreAdditionalItemsReady(additional []velero.ResourceIdentifier, rs *velero.Restore) (bool, error) {
	_, v2, err := a.impl()
	if err != nil || v2 == nil {
		return err == nil, err
	}
	r, err := restore(rs)
	if err != nil {
		return false, err
	}
	return v2.AreAdditionalItemsReady(veleroIDs(additional), r)
}

type blockAdapter struct{ in instance }

func (*blockAdapter) ItemsThroughMethods() {}

func (a *blockAdapter) impl() (ibav1.ItemBlockAction, error) {
	impl, err := a.in.get()
	if err != nil {
		return nil, err
	}
	iba, ok := impl.(ibav1.ItemBlockAction)
	if !ok {
		return nil, fmt.Errorf("plugin %s: %T is not an ItemBlockAction", a.in.name, impl)
	}
	return iba, nil
}

func (a *blockAdapter) AppliesTo() (velero.ResourceSelector, error) {
	if a.in.namedElsewhere() {
		return nothing, nil
	}
	iba, err := a.impl()
	if err != nil {
		return velero.ResourceSelector{}, err
	}
	s, err := iba.AppliesTo()
	return selector(s), err
}

func (a *blockAdapter) GetRelatedItems(in *unstructured.Unstructured, b *velero.Backup) ([]velero.ResourceIdentifier, error) {
	iba, err := a.impl()
	if err != nil {
		return nil, err
	}
	it, err := item(in)
	if err != nil {
		return nil, err
	}
	bk, err := backup(b)
	if err != nil {
		return nil, err
	}
	related, err := iba.GetRelatedItems(it, bk)
	return ids(related), err
}

// Compile-time checks that the adapters are what the SDK exports.
var (
	_ velero.BackupItemActionV2  = (*backupAdapter)(nil)
	_ velero.RestoreItemActionV2 = (*restoreAdapter)(nil)
	_ velero.ItemBlockAction     = (*blockAdapter)(nil)
)
