// Command labels is plugins/labels in Go, through the SDK: it adds labels
// and annotations from its config to every item it applies to when backed
// up, and annotates each restored item with the backup it came from. It
// passes the Rust plugin's own test files unchanged.
//
// Config: labels and annotations are key=value lists separated by commas;
// resources narrows which resources it applies to; restored-from renames
// the restore's annotation, and "-" turns it off. Changing an item is a
// write: the operator grants allowMutate for what it applies to (['*']).
package main

import (
	"fmt"
	"strings"

	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/log"
	"iar.dev/sdk/restoreaction"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// restoredFrom is the annotation a restored item gets.
const restoredFrom = "iar.dev/restored-from"

type labels struct {
	velero.NoBackupOperations
	log log.FieldLogger
}

func init() {
	p := &labels{log: log.New()}
	backupaction.Register(p)
	restoreaction.Register(restorer{labels: p})
}

func main() {}

// ItemsThroughMethods: labels reads and changes items only through their
// methods, so the SDK decodes only their metadata.
func (*labels) ItemsThroughMethods() {}

type pair struct{ key, value string }

// pairs reads a key=value list from the config.
func pairs(key string) ([]pair, error) {
	list, _ := host.Config(key)
	var out []pair
	for _, p := range strings.Split(list, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("config %s: %q is not key=value", key, p)
		}
		out = append(out, pair{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return out, nil
}

func selector() velero.ResourceSelector {
	var resources []string
	for _, r := range strings.Split(host.ConfigOr("resources", ""), ",") {
		if r = strings.TrimSpace(r); r != "" {
			resources = append(resources, r)
		}
	}
	return velero.ResourceSelector{IncludedResources: resources}
}

func (p *labels) AppliesTo() (velero.ResourceSelector, error) { return selector(), nil }

func (p *labels) Execute(item *unstructured.Unstructured, _ *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	ls, err := pairs("labels")
	if err != nil {
		return nil, nil, "", nil, err
	}
	as, err := pairs("annotations")
	if err != nil {
		return nil, nil, "", nil, err
	}
	if len(ls)+len(as) == 0 {
		return nil, nil, "", nil, nil
	}
	for _, l := range ls {
		item.SetLabel(l.key, l.value)
	}
	for _, a := range as {
		item.SetAnnotation(a.key, a.value)
	}
	p.log.Debugf("labelled %s %s", item.GetKind(), item.GetName())
	return item, nil, "", nil, nil
}

// restorer is the restore half (a type of its own: Velero's two
// interfaces have methods of the same names).
type restorer struct {
	velero.NoRestoreOperations
	*labels
}

func (r restorer) AppliesTo() (velero.ResourceSelector, error) { return selector(), nil }

func (r restorer) Execute(in *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	key := host.ConfigOr("restored-from", restoredFrom)
	backup := in.Restore.Spec.BackupName
	if key == "-" || backup == "" {
		return velero.NewRestoreItemActionExecuteOutput(nil), nil
	}
	in.Item.SetAnnotation(key, backup)
	r.log.Debugf("%s %s restored from %s", in.Item.GetKind(), in.Item.GetName(), backup)
	return velero.NewRestoreItemActionExecuteOutput(in.Item), nil
}
