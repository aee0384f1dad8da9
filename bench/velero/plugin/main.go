// Command iar-bench-labels is a Velero BackupItemAction v2 and
// RestoreItemAction v2 plugin written against Velero's own plugin
// framework. It makes the same mutations as iar's `labels` plugin
// configured with `labels: team=payments`: when backing up it sets the
// label team=payments on every item, when restoring the annotation
// iar.dev/restored-from: BACKUP. It is the anchor of `bench/compare.sh`
// and of the Velero restore benchmark.
package main

import (
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
)

// Name is the name the plugin registers under.
const Name = "iar.bench/labels"

type labels struct{ log logrus.FieldLogger }

func (l *labels) Name() string { return Name }

func (l *labels) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{}, nil
}

func (l *labels) Execute(item runtime.Unstructured, backup *api.Backup) (runtime.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	obj := item.UnstructuredContent()
	metadata, _ := obj["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		obj["metadata"] = metadata
	}
	l2, _ := metadata["labels"].(map[string]any)
	if l2 == nil {
		l2 = map[string]any{}
		metadata["labels"] = l2
	}
	l2["team"] = "payments"
	item.SetUnstructuredContent(obj)
	return item, nil, "", nil, nil
}

func (l *labels) Progress(operationID string, backup *api.Backup) (velero.OperationProgress, error) {
	return velero.OperationProgress{}, nil
}

func (l *labels) Cancel(operationID string, backup *api.Backup) error { return nil }

// restored is the restore half.
type restored struct{ log logrus.FieldLogger }

func (r *restored) Name() string { return Name }

func (r *restored) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{}, nil
}

func (r *restored) Execute(input *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	obj := input.Item.UnstructuredContent()
	metadata, _ := obj["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		obj["metadata"] = metadata
	}
	annotations, _ := metadata["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
		metadata["annotations"] = annotations
	}
	annotations["iar.dev/restored-from"] = input.Restore.Spec.BackupName
	input.Item.SetUnstructuredContent(obj)
	return velero.NewRestoreItemActionExecuteOutput(input.Item), nil
}

func (r *restored) Progress(operationID string, restore *api.Restore) (velero.OperationProgress, error) {
	return velero.OperationProgress{}, nil
}

func (r *restored) Cancel(operationID string, restore *api.Restore) error { return nil }

func (r *restored) AreAdditionalItemsReady(items []velero.ResourceIdentifier, restore *api.Restore) (bool, error) {
	return true, nil
}

func main() {
	framework.NewServer().
		RegisterBackupItemActionV2(Name, func(log logrus.FieldLogger) (any, error) {
			return &labels{log: log}, nil
		}).
		RegisterRestoreItemActionV2(Name, func(log logrus.FieldLogger) (any, error) {
			return &restored{log: log}, nil
		}).
		Serve()
}
