// Package velero holds the shapes of Velero's plugin interfaces
// (github.com/vmware-tanzu/velero/pkg/plugin/velero) as iar's contract
// carries them, so that a Velero BackupItemAction v2, ItemBlockAction or
// RestoreItemAction v2 ports by changing its imports and its main().
package velero

import (
	"errors"
	"time"

	"iar.dev/sdk/unstructured"
)

// ResourceSelector is Velero's: which items an action applies to. Empty
// lists and "*" mean everything; excludes win; LabelSelector is a
// Kubernetes label selector ("" matches every item).
type ResourceSelector struct {
	IncludedNamespaces []string
	ExcludedNamespaces []string
	IncludedResources  []string
	ExcludedResources  []string
	LabelSelector      string
}

// GroupResource is apimachinery's schema.GroupResource.
type GroupResource struct {
	Group    string
	Resource string
}

// ResourceIdentifier names one object, as Velero's does.
type ResourceIdentifier struct {
	GroupResource
	Namespace string
	Name      string
}

// OperationProgress is Velero's: how far an asynchronous operation came.
type OperationProgress struct {
	Completed      bool
	Err            string
	NCompleted     int64
	NTotal         int64
	OperationUnits string
	Description    string
	Started        time.Time
	Updated        time.Time
}

// Phase says which pass of a backup a call belongs to (iar's finalize
// pass re-runs the actions on post-operation items, as Velero's does).
type Phase int

const (
	PhaseBackup Phase = iota
	PhaseFinalize
)

// Backup mirrors the fields of velerov1.Backup that iar's contract
// carries: its identity and its spec (as iar passes it, JSON), with the
// spec fields plugins read typed.
type Backup struct {
	Name      string
	Namespace string
	UID       string
	Spec      BackupSpec
	// SpecJSON is the whole spec as the host sent it.
	SpecJSON string
	Phase    Phase
}

// BackupSpec is the subset of velerov1.BackupSpec plugins read.
type BackupSpec struct {
	IncludedNamespaces       []string `json:"includedNamespaces,omitempty"`
	ExcludedNamespaces       []string `json:"excludedNamespaces,omitempty"`
	IncludedResources        []string `json:"includedResources,omitempty"`
	ExcludedResources        []string `json:"excludedResources,omitempty"`
	StorageLocation          string   `json:"storageLocation,omitempty"`
	SnapshotVolumes          *bool    `json:"snapshotVolumes,omitempty"`
	DefaultVolumesToFsBackup *bool    `json:"defaultVolumesToFsBackup,omitempty"`
	IncludeClusterResources  *bool    `json:"includeClusterResources,omitempty"`
}

// Restore mirrors the fields of velerov1.Restore iar's contract carries.
type Restore struct {
	Name      string
	Namespace string
	UID       string
	Spec      RestoreSpec
	SpecJSON  string
}

// RestoreSpec is the subset of velerov1.RestoreSpec plugins read.
type RestoreSpec struct {
	BackupName       string            `json:"backupName,omitempty"`
	NamespaceMapping map[string]string `json:"namespaceMapping,omitempty"`
}

// BackupItemActionV2 is Velero's interface of the same name (without
// Name(): iar names a plugin after its file or its registration).
// Execute returns the item to store; nil stores the input unchanged and
// saves encoding it again (any item returned is sent to the host as it
// is, changed or not).
type BackupItemActionV2 interface {
	AppliesTo() (ResourceSelector, error)
	Execute(item *unstructured.Unstructured, backup *Backup) (*unstructured.Unstructured, []ResourceIdentifier, string, []ResourceIdentifier, error)
	Progress(operationID string, backup *Backup) (OperationProgress, error)
	Cancel(operationID string, backup *Backup) error
}

// ItemsThroughMethods is an optional interface of the actions here (not
// Velero's): an action that has it promises to read and change the items
// it is given (and RestoreItemActionExecuteInput's ItemFromBackup) only
// through *unstructured.Unstructured's methods — GetName, GetLabels,
// SetLabel, SetAnnotation, ..., and UnstructuredContent() for the rest —
// never through the Object field directly, which stays nil until
// UnstructuredContent() or DeepCopy() is called. The SDK then reads an
// item only as far as those methods need (unstructured.FromJSONLazy): a
// plugin that only labels items never decodes their spec and status, and
// its item goes back as the text it came as with only metadata written
// anew. Velero's own plugins already read items so, through
// runtime.Unstructured and meta.Accessor.
type ItemsThroughMethods interface {
	// ItemsThroughMethods marks the action; it is never called.
	ItemsThroughMethods()
}

// ItemBlockAction is Velero's: the items that must be backed up in one
// block with an item.
type ItemBlockAction interface {
	AppliesTo() (ResourceSelector, error)
	GetRelatedItems(item *unstructured.Unstructured, backup *Backup) ([]ResourceIdentifier, error)
}

// RestoreItemActionExecuteInput is Velero's.
type RestoreItemActionExecuteInput struct {
	Item           *unstructured.Unstructured
	ItemFromBackup *unstructured.Unstructured
	Restore        *Restore
}

// RestoreItemActionExecuteOutput is Velero's.
type RestoreItemActionExecuteOutput struct {
	UpdatedItem                 *unstructured.Unstructured
	AdditionalItems             []ResourceIdentifier
	SkipRestore                 bool
	OperationID                 string
	WaitForAdditionalItems      bool
	AdditionalItemsReadyTimeout time.Duration
}

// RestoreItemActionV2 is Velero's interface of the same name.
type RestoreItemActionV2 interface {
	AppliesTo() (ResourceSelector, error)
	Execute(input *RestoreItemActionExecuteInput) (*RestoreItemActionExecuteOutput, error)
	Progress(operationID string, restore *Restore) (OperationProgress, error)
	Cancel(operationID string, restore *Restore) error
	AreAdditionalItemsReady(additionalItems []ResourceIdentifier, restore *Restore) (bool, error)
}

// NewRestoreItemActionExecuteOutput is Velero's constructor.
func NewRestoreItemActionExecuteOutput(item *unstructured.Unstructured) *RestoreItemActionExecuteOutput {
	return &RestoreItemActionExecuteOutput{UpdatedItem: item}
}

// WithoutRestore is Velero's: the item is not created.
func (o *RestoreItemActionExecuteOutput) WithoutRestore() *RestoreItemActionExecuteOutput {
	o.SkipRestore = true
	return o
}

// Error kinds beyond a plain error (which fails the item, permanently).
type (
	retryable        struct{ error }
	unknownOperation struct{ error }
)

// Retryable marks err as transient: the host retries progress at its next
// poll, until the operation's timeout.
func Retryable(err error) error { return retryable{err} }

// UnknownOperation says the operation id is not one this plugin started.
func UnknownOperation(err error) error { return unknownOperation{err} }

// IsRetryable and IsUnknownOperation tell the kinds apart (for the SDK).
func IsRetryable(err error) bool { var r retryable; return errors.As(err, &r) }

func IsUnknownOperation(err error) bool { var u unknownOperation; return errors.As(err, &u) }

func (r retryable) Unwrap() error        { return r.error }
func (u unknownOperation) Unwrap() error { return u.error }
