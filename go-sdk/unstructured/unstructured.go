// Package unstructured is the part of apimachinery's
// k8s.io/apimachinery/pkg/apis/meta/v1/unstructured that plugins use: an
// object as a JSON map, with accessors for its metadata. Numbers are
// json.Number, so an integer round-trips exactly.
package unstructured

import (
	"fmt"
)

// Unstructured is one Kubernetes object.
type Unstructured struct {
	// Object is the object decoded. For an item FromJSONLazy read (the
	// items of an action that declares velero.ItemsThroughMethods) it is
	// nil until UnstructuredContent() or DeepCopy() decodes it: such code
	// reads the item through the methods.
	Object map[string]any
	// src is the text Object was decoded from, for MarshalJSON to copy
	// what is unchanged (nil: Object was not decoded by FromJSON).
	src *source
	// lazy, while set, is the item FromJSONLazy read, whose Object is
	// not decoded yet.
	lazy *lazyObject
}

// FromJSON parses an object.
func FromJSON(text string) (*Unstructured, error) {
	obj, src, err := decodeWithSource(text, true)
	if err != nil {
		return nil, fmt.Errorf("the item is not a JSON object: %w", err)
	}
	return &Unstructured{Object: obj, src: src}, nil
}

// MarshalJSON writes the object as the host reads it (no HTML escaping,
// so "<" stays "<"). What is still as FromJSON decoded it is written as
// the bytes it came as (the same value; its key order and spacing may
// differ from Marshal's), the rest as Marshal writes it.
func (u *Unstructured) MarshalJSON() ([]byte, error) {
	if l := u.lazyItem(); l != nil {
		return l.marshal(make([]byte, 0, len(l.text)+256))
	}
	if u.src != nil && u.Object != nil && mapID(u.Object) == u.src.root {
		return u.src.encode(make([]byte, 0, len(u.src.text)+256), u.Object)
	}
	return Marshal(u.Object)
}

// Marshal is json.Marshal without HTML escaping and the trailing newline.
func Marshal(v any) ([]byte, error) {
	return encode(make([]byte, 0, 1024), v)
}

// UnstructuredContent is apimachinery's runtime.Unstructured accessor:
// Object (decoded now if FromJSONLazy read the item).
func (u *Unstructured) UnstructuredContent() map[string]any {
	u.decode()
	return u.Object
}

// SetUnstructuredContent replaces the object.
func (u *Unstructured) SetUnstructuredContent(obj map[string]any) {
	u.Object, u.src, u.lazy = obj, nil, nil
}

// DeepCopy copies the object.
func (u *Unstructured) DeepCopy() *Unstructured {
	u.decode()
	return &Unstructured{Object: deepCopy(u.Object).(map[string]any)}
}

// lazyItem is the item FromJSONLazy read while its Object is undecoded
// (nil once a plugin set Object itself).
func (u *Unstructured) lazyItem() *lazyObject {
	if u.lazy != nil && u.Object != nil {
		u.lazy, u.src = nil, nil
	}
	return u.lazy
}

// decode decodes Object if FromJSONLazy left it undecoded.
func (u *Unstructured) decode() {
	if u.lazyItem() != nil {
		u.Object, u.src = u.lazy.object()
		u.lazy = nil
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = deepCopy(x)
		}
		return s
	default:
		return v
	}
}

func (u *Unstructured) GetAPIVersion() string { return str(u.top(), "apiVersion") }
func (u *Unstructured) GetKind() string       { return str(u.top(), "kind") }
func (u *Unstructured) GetName() string       { return str(u.metadata(false), "name") }
func (u *Unstructured) GetNamespace() string  { return str(u.metadata(false), "namespace") }
func (u *Unstructured) GetUID() string        { return str(u.metadata(false), "uid") }

func (u *Unstructured) SetName(v string)      { u.metadata(true).set("name", v) }
func (u *Unstructured) SetNamespace(v string) { u.metadata(true).set("namespace", v) }

// GetLabels returns the labels that are strings (a copy).
func (u *Unstructured) GetLabels() map[string]string { return strMap(u.metadata(false), "labels") }

// GetAnnotations returns the annotations that are strings (a copy).
func (u *Unstructured) GetAnnotations() map[string]string {
	return strMap(u.metadata(false), "annotations")
}

// SetLabels replaces the labels.
func (u *Unstructured) SetLabels(m map[string]string) { u.setStrMap("labels", m) }

// SetAnnotations replaces the annotations.
func (u *Unstructured) SetAnnotations(m map[string]string) { u.setStrMap("annotations", m) }

// SetLabel sets one label, keeping the others (labels that are not an
// object are replaced by one).
func (u *Unstructured) SetLabel(k, v string) { u.setEntry("labels", k, v) }

// SetAnnotation sets one annotation, keeping the others.
func (u *Unstructured) SetAnnotation(k, v string) { u.setEntry("annotations", k, v) }

func (u *Unstructured) setEntry(field, k, v string) {
	meta := u.metadata(true)
	if l, ok := meta.(*lazyObject); ok {
		// Skimmed, not decoded: a label added is a member added.
		if s := l.sub(field); s != nil {
			s.set(k, v)
			return
		}
	}
	m, ok := meta.get(field).(map[string]any)
	if !ok {
		m = map[string]any{}
		meta.set(field, m)
	}
	m[k] = v
}

func (u *Unstructured) setStrMap(field string, m map[string]string) {
	meta := u.metadata(true)
	if m == nil {
		meta.del(field)
		return
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	meta.set(field, out)
}

// fields is an object the methods read and change: a map, or a lazily
// read object's members.
type fields interface {
	get(k string) any
	set(k string, v any)
	del(k string)
}

type mapFields map[string]any

func (m mapFields) get(k string) any    { return m[k] }
func (m mapFields) set(k string, v any) { m[k] = v }
func (m mapFields) del(k string)        { delete(m, k) }

// top is the object's top level.
func (u *Unstructured) top() fields {
	if l := u.lazyItem(); l != nil {
		return l
	}
	return mapFields(u.Object)
}

// metadata is the object's metadata (nil fields if it has none, or none
// that is an object, unless ensure: then one replaces it).
func (u *Unstructured) metadata(ensure bool) fields {
	if l := u.lazyItem(); l != nil {
		if s := l.sub("metadata"); s != nil {
			return s
		}
		if m, ok := l.get("metadata").(map[string]any); ok {
			return mapFields(m)
		}
		if !ensure {
			return mapFields(nil)
		}
		m := map[string]any{}
		l.set("metadata", m)
		return mapFields(m)
	}
	m, ok := u.Object["metadata"].(map[string]any)
	if ok || !ensure {
		return mapFields(m)
	}
	if u.Object == nil {
		u.Object = map[string]any{}
	}
	m = map[string]any{}
	u.Object["metadata"] = m
	return mapFields(m)
}

func str(f fields, k string) string {
	s, _ := f.get(k).(string)
	return s
}

func strMap(f fields, k string) map[string]string {
	if l, ok := f.(*lazyObject); ok {
		if s := l.sub(k); s != nil {
			return s.strings()
		}
	}
	src, ok := f.get(k).(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(src))
	for k, v := range src {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// NestedFieldNoCopy is apimachinery's: the value at the path, if every
// step is an object.
func NestedFieldNoCopy(obj map[string]any, fields ...string) (any, bool) {
	var v any = obj
	for _, f := range fields {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[f]; !ok {
			return nil, false
		}
	}
	return v, true
}

// NestedString is apimachinery's (without its error: a value of another
// type reads as absent).
func NestedString(obj map[string]any, fields ...string) (string, bool) {
	v, ok := NestedFieldNoCopy(obj, fields...)
	s, isStr := v.(string)
	return s, ok && isStr
}

// NestedBool reads a boolean at the path.
func NestedBool(obj map[string]any, fields ...string) (bool, bool) {
	v, ok := NestedFieldNoCopy(obj, fields...)
	b, isBool := v.(bool)
	return b, ok && isBool
}

// NestedMap reads an object at the path (no copy).
func NestedMap(obj map[string]any, fields ...string) (map[string]any, bool) {
	v, ok := NestedFieldNoCopy(obj, fields...)
	m, isMap := v.(map[string]any)
	return m, ok && isMap
}

// NestedSlice reads an array at the path (no copy).
func NestedSlice(obj map[string]any, fields ...string) ([]any, bool) {
	v, ok := NestedFieldNoCopy(obj, fields...)
	s, isSlice := v.([]any)
	return s, ok && isSlice
}

// SetNestedField sets the value at the path, creating objects on the way
// (and replacing what is not an object).
func SetNestedField(obj map[string]any, value any, fields ...string) {
	m := obj
	for _, f := range fields[:len(fields)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[f] = next
		}
		m = next
	}
	m[fields[len(fields)-1]] = value
}

// RemoveNestedField removes the value at the path.
func RemoveNestedField(obj map[string]any, fields ...string) {
	m, ok := NestedMap(obj, fields[:len(fields)-1]...)
	if len(fields) == 1 {
		m, ok = obj, true
	}
	if ok {
		delete(m, fields[len(fields)-1])
	}
}
