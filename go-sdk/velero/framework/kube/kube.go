// Package kube gives a plugin a Kubernetes client inside the sandbox: a
// *rest.Config whose transport serves client-go's REST requests from the
// host's cluster calls (contract 1.4.0: cluster-get, cluster-list,
// create, update, patch, delete, cluster-catalog), under the plugin's
// grants. Typed clients (kubernetes.NewForConfig), dynamic clients and
// discovery work as they do against an API server; what the host does not
// offer (watch, subresources, strategic merge and apply patches) is an
// HTTP error naming the request and the rule, never a hang.
//
// A plugin's main builds its clients from Config() where Velero's builds
// them from its client.Factory.
package kube

import (
	"net/http"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"iar.dev/sdk/host"
)

// Host is the address requests name; nothing is dialled.
const Host = "https://kubernetes.iar.invalid"

// Config is a client configuration whose requests go to the host. Rate
// limits are the host's (every call counts against maxHostCalls), so the
// client's own limiter never waits.
func Config() *rest.Config {
	return &rest.Config{
		Host:      Host,
		Transport: transport{},
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/json",
			AcceptContentTypes: "application/json",
		},
		RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter(),
		UserAgent:   "iar-plugin",
	}
}

// Namespace is where the backup tool keeps its objects (Velero's
// Factory.Namespace()): the namespace of the call's Backup or Restore.
func Namespace() string { return host.HomeNamespace() }

type transport struct{}

func (transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	code, body := serve(req)
	return response(req, code, body), nil
}
