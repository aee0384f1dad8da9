package velero

import "fmt"

func noOperation(id string) error {
	return UnknownOperation(fmt.Errorf("this plugin starts no operations (asked for %q)", id))
}

// NoBackupOperations gives a backup action that starts no operations its
// Progress and Cancel: embed it.
type NoBackupOperations struct{}

func (NoBackupOperations) Progress(id string, _ *Backup) (OperationProgress, error) {
	return OperationProgress{}, noOperation(id)
}

func (NoBackupOperations) Cancel(id string, _ *Backup) error { return noOperation(id) }

// NoRestoreOperations gives a restore action that starts no operations
// its Progress, Cancel and AreAdditionalItemsReady (always ready): embed
// it.
type NoRestoreOperations struct{}

func (NoRestoreOperations) Progress(id string, _ *Restore) (OperationProgress, error) {
	return OperationProgress{}, noOperation(id)
}

func (NoRestoreOperations) Cancel(id string, _ *Restore) error { return noOperation(id) }

func (NoRestoreOperations) AreAdditionalItemsReady([]ResourceIdentifier, *Restore) (bool, error) {
	return true, nil
}
