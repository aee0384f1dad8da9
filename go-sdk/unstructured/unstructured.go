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
	Object map[string]any
}

// FromJSON parses an object.
func FromJSON(text string) (*Unstructured, error) {
	obj, err := decodeObject(text)
	if err != nil {
		return nil, fmt.Errorf("the item is not a JSON object: %w", err)
	}
	return &Unstructured{Object: obj}, nil
}

// MarshalJSON writes the object as the host reads it (no HTML escaping,
// so "<" stays "<").
func (u *Unstructured) MarshalJSON() ([]byte, error) { return Marshal(u.Object) }

// Marshal is json.Marshal without HTML escaping and the trailing newline.
func Marshal(v any) ([]byte, error) {
	return encode(make([]byte, 0, 1024), v)
}

// UnstructuredContent is apimachinery's runtime.Unstructured accessor.
func (u *Unstructured) UnstructuredContent() map[string]any { return u.Object }

// SetUnstructuredContent replaces the object.
func (u *Unstructured) SetUnstructuredContent(obj map[string]any) { u.Object = obj }

// DeepCopy copies the object.
func (u *Unstructured) DeepCopy() *Unstructured {
	return &Unstructured{Object: deepCopy(u.Object).(map[string]any)}
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

func (u *Unstructured) GetAPIVersion() string { return str(u.Object, "apiVersion") }
func (u *Unstructured) GetKind() string       { return str(u.Object, "kind") }
func (u *Unstructured) GetName() string       { return str(u.metadata(), "name") }
func (u *Unstructured) GetNamespace() string  { return str(u.metadata(), "namespace") }
func (u *Unstructured) GetUID() string        { return str(u.metadata(), "uid") }

func (u *Unstructured) SetName(v string)      { u.ensureMetadata()["name"] = v }
func (u *Unstructured) SetNamespace(v string) { u.ensureMetadata()["namespace"] = v }

// GetLabels returns the labels that are strings (a copy).
func (u *Unstructured) GetLabels() map[string]string { return strMap(u.metadata(), "labels") }

// GetAnnotations returns the annotations that are strings (a copy).
func (u *Unstructured) GetAnnotations() map[string]string {
	return strMap(u.metadata(), "annotations")
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
	meta := u.ensureMetadata()
	m, ok := meta[field].(map[string]any)
	if !ok {
		m = map[string]any{}
		meta[field] = m
	}
	m[k] = v
}

func (u *Unstructured) setStrMap(field string, m map[string]string) {
	meta := u.ensureMetadata()
	if m == nil {
		delete(meta, field)
		return
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	meta[field] = out
}

func (u *Unstructured) metadata() map[string]any {
	m, _ := u.Object["metadata"].(map[string]any)
	return m
}

func (u *Unstructured) ensureMetadata() map[string]any {
	if u.Object == nil {
		u.Object = map[string]any{}
	}
	m, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		m = map[string]any{}
		u.Object["metadata"] = m
	}
	return m
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func strMap(m map[string]any, k string) map[string]string {
	src, ok := m[k].(map[string]any)
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
