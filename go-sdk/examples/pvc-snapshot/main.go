// Command pvc-snapshot is plugins/pvc-snapshot in Go, through the SDK: it
// snapshots bound CSI PersistentVolumeClaims as Velero's CSI action does,
// as an asynchronous operation (contract 1.2's create, so the operator
// grants allowWrite: [volumesnapshots.snapshot.storage.k8s.io]), and on
// restore points a snapshotted claim at its snapshot (item changes: the
// operator grants allowMutate: [persistentvolumeclaims]). See the Rust
// plugin's documentation for the whole behaviour; this port passes its
// test files unchanged.
//
// Config: snapshot-group (default snapshot.storage.k8s.io),
// snapshot-class (the class for every driver, unless a claim names one).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/log"
	"iar.dev/sdk/names"
	"iar.dev/sdk/restoreaction"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

const (
	// snapshotLabel names a backed-up claim's VolumeSnapshot (Velero's).
	snapshotLabel = "velero.io/volume-snapshot-name"
	// classAnnotation names a claim's VolumeSnapshotClass (Velero's).
	classAnnotation = "velero.io/csi-volume-snapshot-class"
	// classLabel makes a class Velero's choice for its driver.
	classLabel = "velero.io/csi-volumesnapshot-class"
	// mustInclude makes Velero restore a claim's additional items even
	// where the restore's filters exclude them.
	mustInclude = "restore.velero.io/must-include-additional-items"
)

// bindingAnnotations are what the API server and provisioner set on a
// bound claim, dropped from a claim restored from a snapshot.
var bindingAnnotations = []string{
	"pv.kubernetes.io/bind-completed",
	"pv.kubernetes.io/bound-by-controller",
	"volume.beta.kubernetes.io/storage-provisioner",
	"volume.kubernetes.io/storage-provisioner",
	"volume.kubernetes.io/selected-node",
}

type pvcSnapshot struct{ log log.FieldLogger }

// restorer is the restore half (a type of its own: Velero's two
// interfaces have methods of the same names).
type restorer struct {
	velero.NoRestoreOperations
	log log.FieldLogger
}

func init() {
	p := &pvcSnapshot{log: log.New()}
	backupaction.Register(p)
	restoreaction.Register(restorer{log: p.log})
}

func main() {}

func group() string { return host.ConfigOr("snapshot-group", "snapshot.storage.k8s.io") }

func id(group, resource, namespace, name string) velero.ResourceIdentifier {
	return velero.ResourceIdentifier{GroupResource: velero.GroupResource{Group: group, Resource: resource}, Namespace: namespace, Name: name}
}

func (p *pvcSnapshot) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"persistentvolumeclaims", "volumesnapshots." + group()}}, nil
}

// snapshotParts names a VolumeSnapshot's bound content and its class as
// additional items, as Velero's CSI action does.
func snapshotParts(item *unstructured.Unstructured) []velero.ResourceIdentifier {
	g := group()
	var parts []velero.ResourceIdentifier
	if content, ok := unstructured.NestedString(item.Object, "status", "boundVolumeSnapshotContentName"); ok {
		parts = append(parts, id(g, "volumesnapshotcontents", "", content))
	}
	if class, ok := unstructured.NestedString(item.Object, "spec", "volumeSnapshotClassName"); ok {
		parts = append(parts, id(g, "volumesnapshotclasses", "", class))
	}
	return parts
}

func snapshotName(pvc, backup string) string {
	name := pvc + "-" + backup
	if len(name) <= 253 {
		return name
	}
	return names.ObjectName(pvc, pvc, backup)
}

// podVolumes is what one pod says about file-system backup.
type podVolumes struct {
	pod           string
	claims        [][2]string // (claim, volume)
	optIn, optOut []string
}

func podVolumesOf(pod *unstructured.Unstructured) podVolumes {
	listed := func(key string) []string {
		var out []string
		for _, v := range strings.Split(pod.GetAnnotations()[key], ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	pv := podVolumes{pod: pod.GetName(), optIn: listed("backup.velero.io/backup-volumes"), optOut: listed("backup.velero.io/backup-volumes-excludes")}
	if pv.pod == "" {
		pv.pod = "?"
	}
	volumes, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
	for _, v := range volumes {
		m, _ := v.(map[string]any)
		claim, ok1 := unstructured.NestedString(m, "persistentVolumeClaim", "claimName")
		name, ok2 := unstructured.NestedString(m, "name")
		if ok1 && ok2 {
			pv.claims = append(pv.claims, [2]string{claim, name})
		}
	}
	return pv
}

// Each namespace's pods, listed once per backup (keyed by its uid): an
// instance serves one backup's items.
var podsCache struct {
	backup string
	byNS   map[string][]podVolumes
}

func podsOf(namespace, backupKey string) ([]podVolumes, error) {
	if podsCache.backup == backupKey {
		if pods, ok := podsCache.byNS[namespace]; ok {
			return pods, nil
		}
	}
	listed, err := host.List("", "pods", namespace, "")
	if err != nil {
		return nil, velero.Retryable(err)
	}
	pods := make([]podVolumes, len(listed))
	for i, p := range listed {
		pods[i] = podVolumesOf(p)
	}
	if podsCache.backup != backupKey {
		podsCache.backup, podsCache.byNS = backupKey, map[string][]podVolumes{}
	}
	podsCache.byNS[namespace] = pods
	return pods, nil
}

// fsBacked is the pod and volume through which the claim gets a
// file-system backup in this backup, if one does (Velero's CSI action
// skips such a claim).
func fsBacked(namespace, name string, backup *velero.Backup) (string, string, bool, error) {
	byDefault := backup.Spec.DefaultVolumesToFsBackup != nil && *backup.Spec.DefaultVolumesToFsBackup
	key := backup.UID
	if key == "" {
		key = backup.Name
	}
	pods, err := podsOf(namespace, key)
	if err != nil {
		return "", "", false, err
	}
	for _, pod := range pods {
		for _, cv := range pod.claims {
			if cv[0] != name {
				continue
			}
			fs := slices.Contains(pod.optIn, cv[1])
			if byDefault {
				fs = !slices.Contains(pod.optOut, cv[1])
			}
			if fs {
				return pod.pod, cv[1], true, nil
			}
		}
	}
	return "", "", false, nil
}

// csiDriver is the CSI driver of the claim's volume; "" when it is not a
// CSI volume.
func csiDriver(claim *unstructured.Unstructured, namespace, name string) (string, error) {
	volume, ok := unstructured.NestedString(claim.Object, "spec", "volumeName")
	if !ok {
		return "", nil
	}
	pv, err := host.ClusterGet(id("", "persistentvolumes", "", volume))
	if err != nil {
		return "", velero.Retryable(err)
	}
	if pv == nil {
		return "", fmt.Errorf("%s/%s is bound to PersistentVolume %s, which does not exist", namespace, name, volume)
	}
	driver, _ := unstructured.NestedString(pv.Object, "spec", "csi", "driver")
	return driver, nil
}

// snapshotClass is the VolumeSnapshotClass for driver, chosen as Velero
// chooses it.
func snapshotClass(driver, named string) (string, error) {
	g := group()
	if named == "" {
		named, _ = host.Config("snapshot-class")
	}
	if named != "" {
		found, err := host.ClusterGet(id(g, "volumesnapshotclasses", "", named))
		if err != nil {
			return "", velero.Retryable(err)
		}
		if found == nil {
			return "", fmt.Errorf("VolumeSnapshotClass %s does not exist", named)
		}
		if d, _ := unstructured.NestedString(found.Object, "driver"); d != driver {
			if d == "" {
				d = "(none)"
			}
			return "", fmt.Errorf("VolumeSnapshotClass %s is for driver %s, not the volume's %s", named, d, driver)
		}
		return named, nil
	}
	labelled, err := host.List(g, "volumesnapshotclasses", "", classLabel+"=true")
	if err != nil {
		return "", velero.Retryable(err)
	}
	var classes []string
	for _, c := range labelled {
		if d, _ := unstructured.NestedString(c.Object, "driver"); d == driver && c.GetName() != "" {
			classes = append(classes, c.GetName())
		}
	}
	switch len(classes) {
	case 1:
		return classes[0], nil
	case 0:
		return "", fmt.Errorf("no VolumeSnapshotClass for driver %s: label one %s=true, or set this plugin's snapshot-class", driver, classLabel)
	default:
		return "", fmt.Errorf("more than one VolumeSnapshotClass for driver %s is labelled %s=true (%s, %s, ...): keep one, or set this plugin's snapshot-class", driver, classLabel, classes[0], classes[1])
	}
}

func (p *pvcSnapshot) Execute(item *unstructured.Unstructured, backup *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	if item.GetKind() == "VolumeSnapshot" {
		return nil, snapshotParts(item), "", nil, nil
	}
	phase, _ := unstructured.NestedString(item.Object, "status", "phase")
	if backup.Phase == velero.PhaseFinalize || phase != "Bound" {
		return nil, nil, "", nil, nil
	}
	namespace, name := item.GetNamespace(), item.GetName()
	if pod, volume, ok, err := fsBacked(namespace, name, backup); err != nil {
		return nil, nil, "", nil, err
	} else if ok {
		p.log.Infof("%s/%s is backed up as files from pod %s's volume %s: not snapshotted", namespace, name, pod, volume)
		return nil, nil, "", nil, nil
	}
	driver, err := csiDriver(item, namespace, name)
	if err != nil {
		return nil, nil, "", nil, err
	}
	if driver == "" {
		p.log.Infof("%s/%s is not a CSI volume: not snapshotted", namespace, name)
		return nil, nil, "", nil, nil
	}
	class, err := snapshotClass(driver, item.GetAnnotations()[classAnnotation])
	if err != nil {
		return nil, nil, "", nil, err
	}
	snapshot := snapshotName(name, backup.Name)
	g := group()
	vs := id(g, "volumesnapshots", namespace, snapshot)
	labels := map[string]any{}
	if len(backup.Name) <= 63 {
		labels["velero.io/backup-name"] = backup.Name
	}
	object := map[string]any{
		"apiVersion": g + "/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": snapshot, "namespace": namespace, "labels": labels},
		"spec": map[string]any{
			"source":                  map[string]any{"persistentVolumeClaimName": name},
			"volumeSnapshotClassName": class,
		},
	}
	if _, err := host.Create(vs, object); err != nil {
		return nil, nil, "", nil, err
	}
	p.log.Infof("snapshot of %s/%s is %s (class %s)", namespace, name, display(vs), class)
	item.SetLabel(snapshotLabel, snapshot)
	return item, nil, namespace + "/" + snapshot, []velero.ResourceIdentifier{vs}, nil
}

// display is a resource identifier as the Rust SDK shows it:
// "resource.group namespace/name".
func display(r velero.ResourceIdentifier) string {
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	if r.Namespace == "" {
		return res + " " + r.Name
	}
	return res + " " + r.Namespace + "/" + r.Name
}

func snapshotID(operationID string) (velero.ResourceIdentifier, error) {
	ns, name, ok := strings.Cut(operationID, "/")
	if !ok || ns == "" || name == "" {
		return velero.ResourceIdentifier{}, velero.UnknownOperation(fmt.Errorf("%q is not namespace/name", operationID))
	}
	return id(group(), "volumesnapshots", ns, name), nil
}

// timestamp reads an RFC 3339 time; the zero time when absent or not one.
func timestamp(obj map[string]any, fields ...string) time.Time {
	s, _ := unstructured.NestedString(obj, fields...)
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func (p *pvcSnapshot) Progress(operationID string, _ *velero.Backup) (velero.OperationProgress, error) {
	vs, err := snapshotID(operationID)
	if err != nil {
		return velero.OperationProgress{}, err
	}
	snapshot, err := host.ClusterGet(vs)
	if err != nil {
		return velero.OperationProgress{}, velero.Retryable(err)
	}
	if snapshot == nil {
		return velero.OperationProgress{NTotal: 1, OperationUnits: "snapshots", Description: "waiting for " + display(vs) + " to be created"}, nil
	}
	ready, _ := unstructured.NestedBool(snapshot.Object, "status", "readyToUse")
	failure, _ := unstructured.NestedString(snapshot.Object, "status", "error", "message")
	_, failed := unstructured.NestedString(snapshot.Object, "status", "error", "message")
	out := velero.OperationProgress{
		Completed:      ready || failed,
		NTotal:         1,
		OperationUnits: "snapshots",
		Err:            failure,
		Started:        timestamp(snapshot.Object, "metadata", "creationTimestamp"),
		Updated:        timestamp(snapshot.Object, "status", "creationTime"),
	}
	if ready {
		out.NCompleted = 1
	}
	switch {
	case failed:
		out.Description = "snapshot failed: " + failure
	case ready:
		out.Description = "snapshot ready"
	default:
		out.Description = "snapshot in progress"
	}
	return out, nil
}

func (p *pvcSnapshot) Cancel(operationID string, _ *velero.Backup) error {
	vs, err := snapshotID(operationID)
	if err != nil {
		return err
	}
	deleted, err := host.Delete(vs)
	if err != nil {
		return err
	}
	if deleted {
		p.log.Infof("backup gave up on %s: deleted it", display(vs))
	} else {
		p.log.Infof("backup gave up on %s: it was already gone", display(vs))
	}
	return nil
}

func (r restorer) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"persistentvolumeclaims"}}, nil
}

// restoredSnapshotName is the name Velero's VolumeSnapshot restore action
// gives a restored snapshot: the hex sha256 of "<restore uid>/<name>".
func restoredSnapshotName(restoreUID, snapshot string) string {
	sum := sha256.Sum256([]byte(restoreUID + "/" + snapshot))
	return hex.EncodeToString(sum[:])
}

// Execute restores a claim its backup snapshotted from that snapshot, as
// Velero's CSI restore action does; any other claim is left as it is.
func (r restorer) Execute(in *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	snapshot, ok := in.ItemFromBackup.GetLabels()[snapshotLabel]
	if !ok {
		return velero.NewRestoreItemActionExecuteOutput(nil), nil
	}
	g := group()
	restored := restoredSnapshotName(in.Restore.UID, snapshot)
	source := func() map[string]any {
		return map[string]any{"apiGroup": g, "kind": "VolumeSnapshot", "name": restored}
	}
	claim := in.Item.Object
	if spec, ok := claim["spec"].(map[string]any); ok {
		delete(spec, "volumeName")
		spec["dataSource"] = source()
		spec["dataSourceRef"] = source()
	}
	annotations, ok := unstructured.NestedMap(claim, "metadata", "annotations")
	if !ok {
		annotations = map[string]any{}
		unstructured.SetNestedField(claim, annotations, "metadata", "annotations")
	}
	for _, a := range bindingAnnotations {
		delete(annotations, a)
	}
	annotations[mustInclude] = "true"
	r.log.Infof("%s/%s is restored from VolumeSnapshot %s (restored as %s)", in.Item.GetNamespace(), in.Item.GetName(), snapshot, restored)
	out := velero.NewRestoreItemActionExecuteOutput(in.Item)
	out.AdditionalItems = []velero.ResourceIdentifier{id(g, "volumesnapshots", in.ItemFromBackup.GetNamespace(), snapshot)}
	return out, nil
}
