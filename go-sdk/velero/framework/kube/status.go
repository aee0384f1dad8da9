package kube

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
)

// refuse is a metav1.Status failure, so client-go's apierrors.Is* read it
// as they read the API server's.
func refuse(code int, reason, message string) (int, []byte) {
	return failure(code, reason, message, nil)
}

func notFound(t target) (int, []byte) {
	return failure(http.StatusNotFound, "NotFound", t.row.Resource+" \""+t.name+"\" not found", t.details())
}

// failure is the Status body of a failed request; details, when given,
// name the object.
func failure(code int, reason, message string, details map[string]any) (int, []byte) {
	status := map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	}
	if details != nil {
		status["details"] = details
	}
	body, _ := json.Marshal(status)
	return code, body
}

// details are a Status's details for t, as the API server gives them
// (its "kind" is the resource).
func (t target) details() map[string]any {
	return map[string]any{"name": t.name, "group": t.row.Group, "kind": t.row.Resource}
}

var ruleOf = regexp.MustCompile(`\(rule: ([a-z0-9-]+)\)\s*$`)

// hostError is the host's refusal or failure as the API server would
// answer it, by the rule the text names.
func hostError(err error, t target) (int, []byte) {
	msg := err.Error()
	rule := ""
	if m := ruleOf.FindStringSubmatch(msg); m != nil {
		rule = m[1]
	}
	code, reason := http.StatusInternalServerError, "InternalError"
	switch {
	case rule == "create-conflict":
		code, reason = http.StatusConflict, "AlreadyExists"
	case rule == "read-grant", rule == "write-grant", rule == "write-call", rule == "write-namespace",
		rule == "delete-not-own", rule == "update-not-own", rule == "create-limit", rule == "lease-fence",
		rule == "cluster-read-only",
		strings.HasPrefix(rule, "no-") && strings.HasSuffix(rule, "-in-finalize"):
		code, reason = http.StatusForbidden, "Forbidden"
	case rule == "write-object", rule == "write-identity", rule == "update-resource-version":
		code, reason = http.StatusUnprocessableEntity, "Invalid"
	case rule == "patch-type":
		code, reason = http.StatusUnsupportedMediaType, "UnsupportedMediaType"
	case rule == "invalid-identifier", rule == "label-selector":
		code, reason = http.StatusBadRequest, "BadRequest"
	case rule == "list-limit":
		code, reason = http.StatusRequestEntityTooLarge, "RequestEntityTooLarge"
	}
	return failure(code, reason, msg, t.details())
}
