package kube

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"iar.dev/sdk/host"
)

// catalog is the host's resources, asked once per instance (the host
// answers the same list for its life; a fresh instance sees new CRDs).
var catalog struct {
	rows []host.APIResource
	err  error
	done bool
}

func resources() ([]host.APIResource, error) {
	if !catalog.done {
		catalog.rows, catalog.err = host.Resources()
		catalog.done = true
	}
	return catalog.rows, catalog.err
}

func apiVersion(r host.APIResource) string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// lookup is the catalog's row for resource r of group g, asked at
// version v: a version other than the group's preferred one is refused
// by rule (not 404, which a client reads as "no such object").
func lookup(g, v, r string) (host.APIResource, int, []byte) {
	rows, err := resources()
	if err != nil {
		c, b := refuse(http.StatusServiceUnavailable, "ServiceUnavailable", "discovery: "+err.Error())
		return host.APIResource{}, c, b
	}
	for _, row := range rows {
		if row.Group != g || row.Resource != r {
			continue
		}
		if row.Version != v {
			c, b := refuse(http.StatusBadRequest, "BadRequest",
				fmt.Sprintf("iar serves %s at %s only, not %s (rule: preferred-version)", r, apiVersion(row), v))
			return host.APIResource{}, c, b
		}
		return row, 0, nil
	}
	c, b := refuse(http.StatusNotFound, "NotFound",
		fmt.Sprintf("the server could not find the requested resource %s in %s/%s (rule: no-such-resource)", r, g, v))
	return host.APIResource{}, c, b
}

// discovery answers /version, /api, /apis, /apis/G and a group
// version's resource list, in their legacy JSON forms (client-go falls
// back to them from aggregated discovery when the answer is plain
// application/json). ok is false for any other path.
func discovery(path string) (int, []byte, bool) {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	ok := func(v any) (int, []byte, bool) {
		b, _ := json.Marshal(v)
		return http.StatusOK, b, true
	}
	fail := func(code int, reason, message string) (int, []byte, bool) {
		c, b := refuse(code, reason, message)
		return c, b, true
	}
	switch {
	case path == "/version":
		v, err := host.ServerVersion()
		if err != nil {
			return fail(http.StatusServiceUnavailable, "ServiceUnavailable", "/version: "+err.Error())
		}
		return ok(map[string]string{"major": v.Major, "minor": v.Minor, "gitVersion": v.GitVersion})
	case path == "/api":
		return ok(map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []map[string]string{{"clientCIDR": "0.0.0.0/0", "serverAddress": strings.TrimPrefix(Host, "https://")}}})
	case path == "/apis", len(parts) == 2 && parts[0] == "apis",
		len(parts) == 2 && parts[0] == "api", len(parts) == 3 && parts[0] == "apis":
	default:
		return 0, nil, false
	}
	rows, err := resources()
	if err != nil {
		return fail(http.StatusServiceUnavailable, "ServiceUnavailable", "discovery: "+err.Error())
	}
	groups := map[string]string{}
	var order []string
	for _, r := range rows {
		if _, seen := groups[r.Group]; !seen && r.Group != "" {
			order = append(order, r.Group)
		}
		groups[r.Group] = r.Version
	}
	group := func(g string) map[string]any {
		gv := map[string]string{"groupVersion": g + "/" + groups[g], "version": groups[g]}
		return map[string]any{"name": g, "versions": []any{gv}, "preferredVersion": gv}
	}
	switch {
	case path == "/apis":
		list := make([]any, 0, len(order))
		for _, g := range order {
			list = append(list, group(g))
		}
		return ok(map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": list})
	case len(parts) == 2 && parts[0] == "apis":
		if _, known := groups[parts[1]]; !known || parts[1] == "" {
			return fail(http.StatusNotFound, "NotFound", fmt.Sprintf("no group %s (rule: no-such-resource)", parts[1]))
		}
		g := group(parts[1])
		g["kind"], g["apiVersion"] = "APIGroup", "v1"
		return ok(g)
	}
	// A group version's resources.
	g, v := "", parts[1]
	if parts[0] == "apis" {
		g, v = parts[1], parts[2]
	}
	if preferred, known := groups[g]; !known || preferred != v {
		return fail(http.StatusNotFound, "NotFound", fmt.Sprintf("no group version %s (rule: preferred-version)", strings.TrimPrefix(g+"/"+v, "/")))
	}
	list := []any{}
	for _, r := range rows {
		if r.Group != g {
			continue
		}
		entry := map[string]any{"name": r.Resource, "singularName": r.Singular, "namespaced": r.Namespaced,
			"kind": r.Kind, "verbs": nonNil(r.Verbs)}
		if len(r.ShortNames) > 0 {
			entry["shortNames"] = r.ShortNames
		}
		list = append(list, entry)
	}
	return ok(map[string]any{"kind": "APIResourceList", "apiVersion": "v1",
		"groupVersion": strings.TrimPrefix(g+"/"+v, "/"), "resources": list})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
