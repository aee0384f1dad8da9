package host

import (
	"errors"

	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// Imported only by plugins that call them: Go's linker keeps a wasmimport
// only when it is called, so a plugin that never writes does not import
// cluster-write (and needs no write grant to load).

//go:wasmimport iar:plugin/cluster-write@1.4.0 create
func hostCreate(gp, gn, rp, rn, np, nn, mp, mn, op, on, ret uint32)

//go:wasmimport iar:plugin/cluster-write@1.4.0 delete
func hostDelete(gp, gn, rp, rn, np, nn, mp, mn, ret uint32)

//go:wasmimport iar:plugin/cluster-list@1.4.0 list
func hostList(gp, gn, rp, rn, np, nn, sp, sn, ret uint32)

// Create creates object as the object id names (write-grant and the other
// rules of cluster-write apply) and returns it as the cluster holds it:
// the one just created, or the one this plugin created for this backup
// before under that name.
func Create(id velero.ResourceIdentifier, object any) (*unstructured.Unstructured, error) {
	text, err := Marshal(object)
	if err != nil {
		return nil, err
	}
	ret := cabi.NewArea(12)
	a := idArgs(id)
	op, on := cabi.Borrow(text)
	cabi.NoGC(func() { hostCreate(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], op, on, uint32(ret)) })
	keep(id)
	keep(text)
	if ret.U8(0) != 0 {
		return nil, errors.New(ret.Str(4))
	}
	return unstructured.FromJSON(ret.Str(4))
}

// Delete deletes an object this plugin created for this backup; false
// when it no longer exists.
func Delete(id velero.ResourceIdentifier) (bool, error) {
	ret := cabi.NewArea(12)
	a := idArgs(id)
	cabi.NoGC(func() { hostDelete(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], uint32(ret)) })
	keep(id)
	if ret.U8(0) != 0 {
		return false, errors.New(ret.Str(4))
	}
	return ret.U8(4) != 0, nil
}

// List is the objects of one resource ("" group for core) in namespace
// ("" for all, or a cluster-scoped resource) whose labels match
// labelSelector, ordered by namespace and name; at most 1000.
func List(group, resource, namespace, labelSelector string) ([]*unstructured.Unstructured, error) {
	ret := cabi.NewArea(12)
	gp, gn := cabi.Borrow(group)
	rp, rn := cabi.Borrow(resource)
	np, nn := cabi.Borrow(namespace)
	sp, sn := cabi.Borrow(labelSelector)
	cabi.NoGC(func() { hostList(gp, gn, rp, rn, np, nn, sp, sn, uint32(ret)) })
	keep(group)
	keep(resource)
	keep(namespace)
	keep(labelSelector)
	if ret.U8(0) != 0 {
		return nil, errors.New(ret.Str(4))
	}
	items := cabi.Area(ret.U32(4))
	out := make([]*unstructured.Unstructured, ret.U32(8))
	for i := range out {
		o, err := unstructured.FromJSON(items.Str(uint32(i) * 8))
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}
