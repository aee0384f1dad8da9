package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/fields"

	"iar.dev/sdk/host"
	"iar.dev/sdk/velero"
)

// serve answers one request: its status code and JSON body.
func serve(req *http.Request) (int, []byte) {
	path := strings.TrimSuffix(req.URL.Path, "/")
	q := req.URL.Query()
	if q.Get("watch") == "true" || q.Get("watch") == "1" || strings.Contains(path, "/watch/") {
		return refuse(http.StatusMethodNotAllowed, "MethodNotAllowed",
			"watch is not offered to plugins: a plugin call is bounded; poll with get or list (rule: no-watch)")
	}
	if q.Has("dryRun") {
		return refuse(http.StatusBadRequest, "BadRequest", "dry runs are not offered to plugins (rule: no-dry-run)")
	}
	if req.Method == http.MethodGet {
		if code, body, ok := discovery(path); ok {
			return code, body
		}
	}
	target, code, body := parse(path)
	if code != 0 {
		return code, body
	}
	switch req.Method {
	case http.MethodGet:
		if target.name == "" {
			return list(target, q.Get("labelSelector"), q.Get("fieldSelector"))
		}
		return get(target)
	case http.MethodPost:
		if target.name != "" {
			return refuse(http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("POST to an object %s: create posts to its collection", path))
		}
		return create(target, req.Body)
	case http.MethodDelete:
		if target.name == "" {
			return refuse(http.StatusMethodNotAllowed, "MethodNotAllowed", "deleting a collection is not offered to plugins (rule: no-delete-collection)")
		}
		return remove(target)
	case http.MethodPut:
		if target.name == "" {
			return refuse(http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("PUT to a collection %s: update puts to an object", path))
		}
		return update(target, req.Body)
	case http.MethodPatch:
		if target.name == "" {
			return refuse(http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("PATCH of a collection %s: patch an object", path))
		}
		return patch(target, req.Header.Get("Content-Type"), req.Body)
	}
	return refuse(http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("%s is not offered to plugins (rule: no-such-method)", req.Method))
}

// target is a request's resource: its catalog row, namespace and name.
type target struct {
	row       host.APIResource
	namespace string
	name      string
}

func (t target) id() velero.ResourceIdentifier {
	return velero.ResourceIdentifier{
		GroupResource: velero.GroupResource{Group: t.row.Group, Resource: t.row.Resource},
		Namespace:     t.namespace, Name: t.name,
	}
}

// parse reads /api/v1/... and /apis/G/V/... paths.
func parse(path string) (target, int, []byte) {
	var group, version string
	var rest []string
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		version, rest = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, version, rest = parts[1], parts[2], parts[3:]
	default:
		c, b := refuse(http.StatusNotFound, "NotFound", fmt.Sprintf("%s: not offered to plugins (rule: no-such-path)", path))
		return target{}, c, b
	}
	var t target
	// /namespaces/NS/R[/NAME]: namespaced; /namespaces[/NAME]: the
	// Namespace objects themselves.
	if len(rest) >= 3 && rest[0] == "namespaces" {
		t.namespace, rest = rest[1], rest[2:]
	}
	if len(rest) > 2 {
		c, b := refuse(http.StatusMethodNotAllowed, "MethodNotAllowed",
			fmt.Sprintf("subresource %s of %s: plugins reach objects only (rule: no-subresource)", strings.Join(rest[2:], "/"), rest[0]))
		return target{}, c, b
	}
	row, code, body := lookup(group, version, rest[0])
	if code != 0 {
		return target{}, code, body
	}
	t.row = row
	if len(rest) == 2 {
		t.name = rest[1]
	}
	return t, 0, nil
}

func get(t target) (int, []byte) {
	obj, err := host.ClusterGet(t.id())
	if err != nil {
		return hostError(err, t)
	}
	if obj == nil {
		return notFound(t)
	}
	text, err := obj.MarshalJSON()
	if err != nil {
		return refuse(http.StatusInternalServerError, "InternalError", err.Error())
	}
	return http.StatusOK, text
}

func list(t target, labels, fieldSelector string) (int, []byte) {
	var match fields.Selector
	if fieldSelector != "" {
		s, err := fields.ParseSelector(fieldSelector)
		if err != nil {
			return refuse(http.StatusBadRequest, "BadRequest", fmt.Sprintf("field selector %s: %v (rule: field-selector)", fieldSelector, err))
		}
		for _, r := range s.Requirements() {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				return refuse(http.StatusBadRequest, "BadRequest",
					fmt.Sprintf("field selector %s: only metadata.name and metadata.namespace (rule: field-selector)", fieldSelector))
			}
		}
		match = s
	}
	objs, err := host.List(t.row.Group, t.row.Resource, t.namespace, labels)
	if err != nil {
		return hostError(err, t)
	}
	items := make([]json.RawMessage, 0, len(objs))
	for _, o := range objs {
		if match != nil && !match.Matches(fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()}) {
			continue
		}
		text, err := o.MarshalJSON()
		if err != nil {
			return refuse(http.StatusInternalServerError, "InternalError", err.Error())
		}
		items = append(items, text)
	}
	body, _ := json.Marshal(map[string]any{
		"apiVersion": apiVersion(t.row), "kind": t.row.Kind + "List",
		"metadata": map[string]any{}, "items": items,
	})
	return http.StatusOK, body
}

// objectBody reads a create's or update's body: a JSON object whose
// namespace, if it names one, is the path's (as the API server checks).
// code is non-zero when the request is refused, with its answer.
func objectBody(t target, body io.Reader) (raw []byte, meta map[string]any, code int, answer []byte) {
	raw, err := io.ReadAll(body)
	if err != nil {
		code, answer = refuse(http.StatusBadRequest, "BadRequest", err.Error())
		return nil, nil, code, answer
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		code, answer = refuse(http.StatusBadRequest, "BadRequest", fmt.Sprintf("the object is not JSON: %v", err))
		return nil, nil, code, answer
	}
	meta, _ = obj["metadata"].(map[string]any)
	if ns, _ := meta["namespace"].(string); ns != "" && ns != t.namespace {
		code, answer = refuse(http.StatusBadRequest, "BadRequest",
			fmt.Sprintf("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", ns, t.namespace))
		return nil, nil, code, answer
	}
	return raw, meta, 0, nil
}

func create(t target, body io.Reader) (int, []byte) {
	raw, meta, code, answer := objectBody(t, body)
	if code != 0 {
		return code, answer
	}
	t.name, _ = meta["name"].(string)
	created, err := host.Create(t.id(), json.RawMessage(raw))
	if err != nil {
		return hostError(err, t)
	}
	text, err := created.MarshalJSON()
	if err != nil {
		return refuse(http.StatusInternalServerError, "InternalError", err.Error())
	}
	return http.StatusCreated, text
}

func update(t target, body io.Reader) (int, []byte) {
	raw, meta, code, answer := objectBody(t, body)
	if code != 0 {
		return code, answer
	}
	// As the API server: the body names the object the path does.
	if name, _ := meta["name"].(string); name != t.name {
		return refuse(http.StatusBadRequest, "BadRequest",
			fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", name, t.name))
	}
	written, err := host.Update(t.id(), json.RawMessage(raw))
	return writeAnswer(t, written, err)
}

// patchTypes are the patch bodies the host applies, by Content-Type.
var patchTypes = map[string]host.PatchType{
	"application/merge-patch+json":           host.PatchMerge,
	"application/json-patch+json":            host.PatchJSON,
	"application/strategic-merge-patch+json": host.PatchStrategicMerge,
}

func patch(t target, contentType string, body io.Reader) (int, []byte) {
	mediaType, _, _ := strings.Cut(contentType, ";")
	mediaType = strings.TrimSpace(mediaType)
	kind, ok := patchTypes[mediaType]
	if !ok {
		if strings.HasPrefix(mediaType, "application/apply-patch") {
			return refuse(http.StatusUnsupportedMediaType, "UnsupportedMediaType",
				"server-side apply is not offered to plugins; use a merge patch (rule: no-apply)")
		}
		return refuse(http.StatusUnsupportedMediaType, "UnsupportedMediaType",
			fmt.Sprintf("patch type %q: merge-patch+json or json-patch+json (rule: patch-type)", contentType))
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return refuse(http.StatusBadRequest, "BadRequest", err.Error())
	}
	written, err := host.Patch(t.id(), kind, raw)
	return writeAnswer(t, written, err)
}

// writeAnswer is an update's or patch's answer as the API server gives
// it: the object, or a Status client-go's apierrors.Is* read.
func writeAnswer(t target, written interface{ MarshalJSON() ([]byte, error) }, err error) (int, []byte) {
	if err != nil {
		we, ok := err.(*host.WriteError)
		if !ok || we.Kind == host.WriteRefused {
			return hostError(err, t)
		}
		switch we.Kind {
		case host.WriteConflict:
			return failure(http.StatusConflict, "Conflict", we.Message, t.details())
		case host.WriteNotFound:
			return failure(http.StatusNotFound, "NotFound", we.Message, t.details())
		case host.WriteInvalid:
			return failure(http.StatusUnprocessableEntity, "Invalid", we.Message, t.details())
		default:
			return failure(http.StatusServiceUnavailable, "ServiceUnavailable", we.Message, t.details())
		}
	}
	text, err := written.MarshalJSON()
	if err != nil {
		return refuse(http.StatusInternalServerError, "InternalError", err.Error())
	}
	return http.StatusOK, text
}

func remove(t target) (int, []byte) {
	gone, err := host.Delete(t.id())
	if err != nil {
		return hostError(err, t)
	}
	if !gone {
		return notFound(t)
	}
	body, _ := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Success",
		"details": t.details()})
	return http.StatusOK, body
}

func response(req *http.Request, code int, body []byte) *http.Response {
	return &http.Response{
		StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
