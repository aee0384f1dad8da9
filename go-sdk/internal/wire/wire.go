// Package wire lifts the contract's records from the canonical ABI into
// the velero package's types and lowers results back, for the export
// packages (backupaction, blockaction, restoreaction).
package wire

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unsafe"

	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// Backup lifts types.backup from its flattened form.
func Backup(np, nn, sp, sn, up, un, jp, jn, phase uint32) (*velero.Backup, error) {
	b := &velero.Backup{
		Name:      cabi.String(np, nn),
		Namespace: cabi.String(sp, sn),
		UID:       cabi.String(up, un),
		SpecJSON:  cabi.String(jp, jn),
		Phase:     velero.Phase(phase),
	}
	if err := backupSpecs.decode(b.SpecJSON, &b.Spec, cloneBackupSpec); err != nil {
		return nil, fmt.Errorf("backup %s: spec: %w", b.Name, err)
	}
	return b, nil
}

// Restore lifts restore-item-action.restore.
func Restore(np, nn, sp, sn, up, un, jp, jn uint32) (*velero.Restore, error) {
	r := &velero.Restore{
		Name:      cabi.String(np, nn),
		Namespace: cabi.String(sp, sn),
		UID:       cabi.String(up, un),
		SpecJSON:  cabi.String(jp, jn),
	}
	if err := restoreSpecs.decode(r.SpecJSON, &r.Spec, cloneRestoreSpec); err != nil {
		return nil, fmt.Errorf("restore %s: spec: %w", r.Name, err)
	}
	return r, nil
}

// lastSpec is the last spec decoded: every call of one backup or restore
// carries the same spec, and encoding/json's reflection over a real
// backup's spec took about 10 µs of a wasm call. A repeated spec is a
// copy of the one decoded (its slices, maps and pointers too, so that a
// plugin changing its Backup does not change the next call's).
type lastSpec[T any] struct {
	text string
	spec T
	err  error
}

var (
	backupSpecs  lastSpec[velero.BackupSpec]
	restoreSpecs lastSpec[velero.RestoreSpec]
)

func (l *lastSpec[T]) decode(text string, into *T, clone func(T) T) error {
	if text == "" {
		return nil
	}
	if text != l.text || l.text == "" {
		var s T
		err := json.Unmarshal([]byte(text), &s)
		*l = lastSpec[T]{text, s, err}
	}
	if l.err != nil {
		return l.err
	}
	*into = clone(l.spec)
	return nil
}

func cloneBackupSpec(s velero.BackupSpec) velero.BackupSpec {
	s.IncludedNamespaces = slices.Clone(s.IncludedNamespaces)
	s.ExcludedNamespaces = slices.Clone(s.ExcludedNamespaces)
	s.IncludedResources = slices.Clone(s.IncludedResources)
	s.ExcludedResources = slices.Clone(s.ExcludedResources)
	s.SnapshotVolumes = cloneBool(s.SnapshotVolumes)
	s.DefaultVolumesToFsBackup = cloneBool(s.DefaultVolumesToFsBackup)
	s.IncludeClusterResources = cloneBool(s.IncludeClusterResources)
	return s
}

func cloneRestoreSpec(s velero.RestoreSpec) velero.RestoreSpec {
	s.NamespaceMapping = maps.Clone(s.NamespaceMapping)
	return s
}

func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}

// SetSelector writes a resource-selector record at off (44 bytes).
func SetSelector(a cabi.Area, off uint32, s velero.ResourceSelector) {
	for i, l := range [][]string{s.IncludedNamespaces, s.ExcludedNamespaces, s.IncludedResources, s.ExcludedResources} {
		setStrings(a, off+uint32(i)*8, l)
	}
	a.SetStr(off+32, s.LabelSelector)
}

func setStrings(a cabi.Area, off uint32, l []string) {
	if len(l) == 0 {
		return
	}
	items := cabi.NewArea(uint32(len(l)) * 8)
	for i, s := range l {
		items.SetStr(uint32(i)*8, s)
	}
	a.SetU32(off, uint32(items))
	a.SetU32(off+4, uint32(len(l)))
}

// SetIDs writes list<resource-identifier> at off.
func SetIDs(a cabi.Area, off uint32, ids []velero.ResourceIdentifier) {
	if len(ids) == 0 {
		return
	}
	items := cabi.NewArea(uint32(len(ids)) * 32)
	for i, id := range ids {
		at := uint32(i) * 32
		items.SetStr(at, id.Group)
		items.SetStr(at+8, id.Resource)
		items.SetStr(at+16, id.Namespace)
		items.SetStr(at+24, id.Name)
	}
	a.SetU32(off, uint32(items))
	a.SetU32(off+4, uint32(len(ids)))
}

// IDs lifts list<resource-identifier>.
func IDs(ptr, n uint32) []velero.ResourceIdentifier {
	items := cabi.Area(ptr)
	out := make([]velero.ResourceIdentifier, n)
	for i := range out {
		at := uint32(i) * 32
		out[i] = velero.ResourceIdentifier{
			GroupResource: velero.GroupResource{Group: items.Str(at), Resource: items.Str(at + 8)},
			Namespace:     items.Str(at + 16),
			Name:          items.Str(at + 24),
		}
	}
	return out
}

// SetError writes result's err case: the discriminant at 0 and the
// action-error variant at off.
func SetError(a cabi.Area, off uint32, err error) {
	a.SetU8(0, 1)
	var tag uint8
	switch {
	case velero.IsUnknownOperation(err):
		tag = 2
	case velero.IsRetryable(err):
		tag = 1
	}
	a.SetU8(off, tag)
	a.SetStr(off+4, err.Error())
}

// Item lifts an item's JSON: skimmed only (unstructured.FromJSONLazy)
// for an action that reads items only through their methods
// (velero.ItemsThroughMethods), else decoded.
func Item(ptr, n uint32, action any) (*unstructured.Unstructured, string, error) {
	text := cabi.Lifted(ptr, n)
	if _, ok := action.(velero.ItemsThroughMethods); ok {
		u, err := unstructured.FromJSONLazy(text)
		return u, text, err
	}
	u, err := unstructured.FromJSON(text)
	return u, text, err
}

// Changed is the JSON of out, nil for a nil item (the contract's none:
// the host keeps its own copy). An item is sent whenever one is returned:
// telling an unchanged one apart would cost a second encoding of every
// item (measured: about a third of a labels call), so return nil when
// nothing changed.
func Changed(out *unstructured.Unstructured) (*string, error) {
	if out == nil {
		return nil, nil
	}
	b, err := out.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("the returned item: %w", err)
	}
	// b is this call's own: a string over it, not a copy (on wasm each
	// copy of an item is an allocation of its size).
	s := unsafe.String(unsafe.SliceData(b), len(b))
	return &s, nil
}

// Result is an export's body after its arguments are lifted: f writes
// the ok case's payload into a fresh result area of size bytes, with the
// collector on and panics turned into errors; an error replaces the area
// with the err case, its action-error at errAt. Returns the area's
// address, the export's return value.
func Result(size, errAt uint32, f func(ret cabi.Area) error) uint32 {
	cabi.Enter()
	defer cabi.Leave()
	ret := cabi.NewArea(size)
	err := func() (err error) {
		defer Guard(&err)
		return f(ret)
	}()
	if err != nil {
		ret = cabi.NewArea(size)
		SetError(ret, errAt, err)
	}
	return uint32(ret)
}

// AppliesTo is every interface's applies-to: result<resource-selector,
// action-error>, payload at 4. appliesTo runs only once registered()
// says an action is there.
func AppliesTo(registered func() error, appliesTo func() (velero.ResourceSelector, error)) uint32 {
	return Result(48, 4, func(ret cabi.Area) error {
		if err := registered(); err != nil {
			return err
		}
		sel, err := appliesTo()
		if err == nil {
			SetSelector(ret, 4, sel)
		}
		return err
	})
}

// Guard turns a Go panic in the plugin into the call's error (a trap
// would only say "unreachable"): the panic's value and where it happened,
// the first frame below the panic.
func Guard(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("panic: %v%s", r, panicSite(string(debug.Stack())))
	}
}

// panicSite is " at FUNCTION (FILE:LINE)" of the frame that panicked, read
// from a stack that Guard's recover printed: the frame after "panic(".
func panicSite(stack string) string {
	lines := strings.Split(stack, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") && i+3 < len(lines) {
			fn := lines[i+2]
			if j := strings.LastIndex(fn, "("); j > 0 {
				fn = fn[:j]
			}
			file := strings.TrimSpace(lines[i+3])
			if j := strings.LastIndex(file, " +"); j > 0 {
				file = file[:j]
			}
			return fmt.Sprintf(" at %s (%s)", fn, file)
		}
	}
	return ""
}

// SetProgress writes an operation-progress record at off (96 bytes).
func SetProgress(a cabi.Area, off uint32, p velero.OperationProgress) {
	a.SetBool(off, p.Completed)
	if p.Err != "" {
		a.SetOptStr(off+4, &p.Err)
	}
	a.SetI64(off+16, p.NCompleted)
	a.SetI64(off+24, p.NTotal)
	a.SetStr(off+32, p.OperationUnits)
	a.SetStr(off+40, p.Description)
	setTime(a, off+48, p.Started)
	setTime(a, off+72, p.Updated)
}

// setTime writes option<timestamp>: none for the zero time.
func setTime(a cabi.Area, off uint32, t time.Time) {
	if t.IsZero() {
		return
	}
	a.SetU8(off, 1)
	a.SetI64(off+8, t.Unix())
	a.SetU32(off+16, uint32(t.Nanosecond()))
}
