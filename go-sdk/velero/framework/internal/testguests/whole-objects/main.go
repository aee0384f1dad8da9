// Test guest: a Velero backup and restore item action (Velero's own v2
// interfaces and types) that records what it reads of the whole Backup or
// Restore it is called with (contract 1.4.0's runs): each item comes back
// annotated with the object's labels, annotations, phase, start time and
// spec fields, as Velero's typed fields hold them. Not an example to follow.
package main

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/sirupsen/logrus"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"iar.dev/sdk/velero/framework"
	_ "iar.dev/sdk/velero/framework/backupitemaction"
	_ "iar.dev/sdk/velero/framework/restoreitemaction"
)

func init() {
	framework.NewServer().
		RegisterBackupItemActionV2("iar.test/whole-backup", func(logrus.FieldLogger) (any, error) { return &backupAction{}, nil }).
		RegisterRestoreItemActionV2("iar.test/whole-restore", func(logrus.FieldLogger) (any, error) { return &restoreAction{}, nil }).
		Serve()
}

func main() {}

// errNoOperations: neither action starts an operation.
var errNoOperations = errors.New("this action starts no operations")

// seen is what the action read, as one JSON annotation.
type seen struct {
	Name           string            `json:"name"`
	UID            string            `json:"uid"`
	Labels         map[string]string `json:"labels"`
	Annotations    map[string]string `json:"annotations"`
	Phase          string            `json:"phase"`
	StartTimestamp string            `json:"startTimestamp"`
	Spec           any               `json:"spec"`
}

func annotate(item runtime.Unstructured, s seen) (runtime.Unstructured, error) {
	text, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: item.UnstructuredContent()}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations["iar.test/seen"] = string(text)
	u.SetAnnotations(annotations)
	return u, nil
}

type backupAction struct{}

func (*backupAction) Name() string { return "iar.test/whole-backup" }

func (*backupAction) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"pods"}}, nil
}

func (*backupAction) Execute(item runtime.Unstructured, backup *velerov1.Backup) (runtime.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	s := seen{
		Name: backup.Name, UID: string(backup.UID),
		Labels: backup.Labels, Annotations: backup.Annotations,
		Phase: string(backup.Status.Phase),
		Spec:  map[string]any{"ttl": backup.Spec.TTL.Duration.String(), "includedNamespaces": backup.Spec.IncludedNamespaces},
	}
	if ts := backup.Status.StartTimestamp; ts != nil {
		s.StartTimestamp = ts.UTC().Format(time.RFC3339)
	}
	out, err := annotate(item, s)
	return out, nil, "", nil, err
}

func (*backupAction) Progress(string, *velerov1.Backup) (velero.OperationProgress, error) {
	return velero.OperationProgress{}, errNoOperations
}

func (*backupAction) Cancel(string, *velerov1.Backup) error { return nil }

type restoreAction struct{}

func (*restoreAction) Name() string { return "iar.test/whole-restore" }

func (*restoreAction) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"configmaps"}}, nil
}

func (*restoreAction) Execute(in *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	r := in.Restore
	s := seen{
		Name: r.Name, UID: string(r.UID),
		Labels: r.Labels, Annotations: r.Annotations,
		Phase: string(r.Status.Phase),
		Spec:  map[string]any{"backupName": r.Spec.BackupName, "namespaceMapping": r.Spec.NamespaceMapping},
	}
	if ts := r.Status.StartTimestamp; ts != nil {
		s.StartTimestamp = ts.UTC().Format(time.RFC3339)
	}
	out, err := annotate(in.Item, s)
	if err != nil {
		return nil, err
	}
	return velero.NewRestoreItemActionExecuteOutput(out), nil
}

func (*restoreAction) Progress(string, *velerov1.Restore) (velero.OperationProgress, error) {
	return velero.OperationProgress{}, errNoOperations
}

func (*restoreAction) Cancel(string, *velerov1.Restore) error { return nil }

func (*restoreAction) AreAdditionalItemsReady([]velero.ResourceIdentifier, *velerov1.Restore) (bool, error) {
	return true, nil
}
