// Command iar-bench-labels is a Velero BackupItemAction v2 plugin written
// against Velero's own plugin framework. It makes the same mutation as iar's
// `labels` plugin configured with `labels: team=payments`: it sets the label
// team=payments on every item. It is the anchor of `bench/compare.sh`.
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

func main() {
	framework.NewServer().
		RegisterBackupItemActionV2(Name, func(log logrus.FieldLogger) (any, error) {
			return &labels{log: log}, nil
		}).
		Serve()
}
