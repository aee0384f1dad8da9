package framework

import (
	"encoding/json"
	"fmt"

	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	vplugin "github.com/vmware-tanzu/velero/pkg/plugin/velero"
	apiunstructured "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"iar.dev/sdk/host"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// item is the SDK's item as Velero's plugin servers hand it over:
// json.Unmarshal into an *unstructured.Unstructured.
func item(in *unstructured.Unstructured) (*apiunstructured.Unstructured, error) {
	if in == nil {
		return nil, nil
	}
	text, err := in.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var out apiunstructured.Unstructured
	if err := json.Unmarshal(text, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// returned is an item a plugin returned, as Velero's plugin servers send
// it back (json.Marshal of UnstructuredContent()); nil stays nil (the
// host keeps the item it has, as Velero sends the request's bytes back).
// The SDK's item is skimmed from those bytes, not decoded: it goes to
// the host as the same bytes.
func returned(out runtime.Unstructured) (*unstructured.Unstructured, error) {
	if out == nil {
		return nil, nil
	}
	text, err := json.Marshal(out.UnstructuredContent())
	if err != nil {
		return nil, fmt.Errorf("the returned item: %w", err)
	}
	return unstructured.FromJSONLazy(string(text))
}

func selector(s vplugin.ResourceSelector) velero.ResourceSelector {
	return velero.ResourceSelector{
		IncludedNamespaces: s.IncludedNamespaces,
		ExcludedNamespaces: s.ExcludedNamespaces,
		IncludedResources:  s.IncludedResources,
		ExcludedResources:  s.ExcludedResources,
		LabelSelector:      s.LabelSelector,
	}
}

func ids(in []vplugin.ResourceIdentifier) []velero.ResourceIdentifier {
	if in == nil {
		return nil
	}
	out := make([]velero.ResourceIdentifier, len(in))
	for i, id := range in {
		out[i] = velero.ResourceIdentifier{
			GroupResource: velero.GroupResource{Group: id.Group, Resource: id.Resource},
			Namespace:     id.Namespace,
			Name:          id.Name,
		}
	}
	return out
}

func veleroIDs(in []velero.ResourceIdentifier) []vplugin.ResourceIdentifier {
	if in == nil {
		return nil
	}
	out := make([]vplugin.ResourceIdentifier, len(in))
	for i, id := range in {
		out[i] = vplugin.ResourceIdentifier{Namespace: id.Namespace, Name: id.Name}
		out[i].Group, out[i].Resource = id.Group, id.Resource
	}
	return out
}

func progress(p vplugin.OperationProgress) velero.OperationProgress {
	return velero.OperationProgress{
		Completed:      p.Completed,
		Err:            p.Err,
		NCompleted:     p.NCompleted,
		NTotal:         p.NTotal,
		OperationUnits: p.OperationUnits,
		Description:    p.Description,
		Started:        p.Started,
		Updated:        p.Updated,
	}
}

// lastObject keeps the last Backup or Restore built, by the text it came
// from: every call of one pass carries the same object, and a plugin gets
// its own deep copy of it (as Velero's servers decode a fresh one per
// call).
type lastObject[T any] struct {
	key string
	obj *T
	err error
}

var (
	lastBackup  lastObject[velerov1.Backup]
	lastRestore lastObject[velerov1.Restore]
)

// backup is the whole velerov1.Backup the call belongs to, as the host
// holds it (contract 1.4.0's runs: the object Velero's server sent, iar's
// Backup resource), decoded as Velero's plugin servers decode it
// (json.Unmarshal); built from the call's record (name, namespace, uid,
// spec) when the host has none.
func backup(b *velero.Backup) (*velerov1.Backup, error) {
	if b == nil {
		return nil, nil
	}
	text, whole := host.BackupObject()
	key := runKey(text, whole, b.Name, b.Namespace, b.UID, b.SpecJSON)
	return cached(&lastBackup, key, func() (*velerov1.Backup, error) {
		out := &velerov1.Backup{}
		if whole {
			return out, decodeWhole("backup", b.Name, text, out)
		}
		out.APIVersion, out.Kind = velerov1.SchemeGroupVersion.String(), "Backup"
		out.Name, out.Namespace, out.UID = b.Name, b.Namespace, types.UID(b.UID)
		return out, decodeSpec("backup", b.Name, b.SpecJSON, &out.Spec)
	})
}

// restore is the whole velerov1.Restore the call belongs to (see backup).
func restore(r *velero.Restore) (*velerov1.Restore, error) {
	if r == nil {
		return nil, nil
	}
	text, whole := host.RestoreObject()
	key := runKey(text, whole, r.Name, r.Namespace, r.UID, r.SpecJSON)
	return cached(&lastRestore, key, func() (*velerov1.Restore, error) {
		out := &velerov1.Restore{}
		if whole {
			return out, decodeWhole("restore", r.Name, text, out)
		}
		out.APIVersion, out.Kind = velerov1.SchemeGroupVersion.String(), "Restore"
		out.Name, out.Namespace, out.UID = r.Name, r.Namespace, types.UID(r.UID)
		return out, decodeSpec("restore", r.Name, r.SpecJSON, &out.Spec)
	})
}

// runKey is what a decoded object is kept by: the host's text, or, with
// none, the record's fields (prefixed so that no text equals it).
func runKey(text string, whole bool, name, namespace, uid, spec string) string {
	if whole {
		return text
	}
	return "\x00" + name + "\x00" + namespace + "\x00" + uid + "\x00" + spec
}

// cached is last's object when key is its key, else the one build makes
// (kept with its error); a deep copy, so that a plugin may change it.
func cached[T any, PT interface {
	*T
	DeepCopy() *T
}](last *lastObject[T], key string, build func() (*T, error)) (*T, error) {
	if last.obj == nil || last.key != key {
		obj, err := build()
		*last = lastObject[T]{key, obj, err}
	}
	if last.err != nil {
		return nil, last.err
	}
	return PT(last.obj).DeepCopy(), nil
}

func decodeWhole(what, name, text string, out any) error {
	if err := json.Unmarshal([]byte(text), out); err != nil {
		return fmt.Errorf("%s %s: the object the host gave: %w", what, name, err)
	}
	return nil
}

func decodeSpec(what, name, spec string, out any) error {
	if spec == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(spec), out); err != nil {
		return fmt.Errorf("%s %s: spec: %w", what, name, err)
	}
	return nil
}
