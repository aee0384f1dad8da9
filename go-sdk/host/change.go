package host

import (
	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// Contract 1.4.0's update and patch of the plugin's own objects. Imported
// only by plugins that call them, as create and delete are.

//go:wasmimport iar:plugin/cluster-write@1.4.0 update
func hostUpdate(gp, gn, rp, rn, np, nn, mp, mn, op, on, ret uint32)

//go:wasmimport iar:plugin/cluster-write@1.4.0 patch
func hostPatch(gp, gn, rp, rn, np, nn, mp, mn, kind, bp, bn, ret uint32)

// PatchType is how a patch's body is read.
type PatchType uint8

const (
	// PatchMerge is an RFC 7386 JSON merge patch.
	PatchMerge PatchType = iota
	// PatchJSON is an RFC 6902 JSON patch.
	PatchJSON
	// PatchStrategicMerge is Kubernetes' strategic merge patch: refused by
	// the host (rule patch-type).
	PatchStrategicMerge
)

// WriteErrorKind says why an update or patch wrote nothing.
type WriteErrorKind uint8

const (
	// WriteRefused: a rule refused it, nothing was sent; the message ends
	// "(rule: NAME)".
	WriteRefused WriteErrorKind = iota
	// WriteConflict: the object changed since the version written over;
	// read it again and retry.
	WriteConflict
	// WriteNotFound: no such object.
	WriteNotFound
	// WriteInvalid: the patch does not apply, or the cluster refused the
	// result.
	WriteInvalid
	// WriteUnavailable: the cluster failed or did not answer; retry later.
	WriteUnavailable
)

// WriteError is an update's or patch's failure.
type WriteError struct {
	Kind    WriteErrorKind
	Message string
}

func (e *WriteError) Error() string { return e.Message }

// Update replaces an object this plugin created for this backup with
// object, which carries the metadata.resourceVersion it was read at; a
// change made since is a WriteConflict. Returns the object as written.
func Update(id velero.ResourceIdentifier, object any) (*unstructured.Unstructured, error) {
	text, err := Marshal(object)
	if err != nil {
		return nil, err
	}
	ret := cabi.NewArea(16)
	a := idArgs(id)
	op, on := cabi.Borrow(text)
	cabi.NoGC(func() { hostUpdate(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], op, on, uint32(ret)) })
	keep(id)
	keep(text)
	return changed(ret)
}

// Patch patches an object this plugin created for this backup with body
// (a merge patch or a JSON patch, as kind says). Without a
// metadata.resourceVersion in a merge patch it applies to the object as
// it is. Returns the object as written.
func Patch(id velero.ResourceIdentifier, kind PatchType, body []byte) (*unstructured.Unstructured, error) {
	text := string(body)
	ret := cabi.NewArea(16)
	a := idArgs(id)
	bp, bn := cabi.Borrow(text)
	cabi.NoGC(func() {
		hostPatch(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], uint32(kind), bp, bn, uint32(ret))
	})
	keep(id)
	keep(text)
	return changed(ret)
}

// changed lifts result<string, write-error>: the tag at 0; ok's string at
// 4; the error's case at 4 and its string at 8.
func changed(ret cabi.Area) (*unstructured.Unstructured, error) {
	if ret.U8(0) != 0 {
		return nil, &WriteError{Kind: WriteErrorKind(ret.U8(4)), Message: ret.Str(8)}
	}
	return unstructured.FromJSON(ret.Str(4))
}
