package host

import (
	"errors"

	"iar.dev/sdk/internal/cabi"
)

//go:wasmimport iar:plugin/cluster-catalog@1.4.0 resources
func catalogResources(ret uint32)

//go:wasmimport iar:plugin/cluster-catalog@1.4.0 server-version
func catalogServerVersion(ret uint32)

//go:wasmimport iar:plugin/cluster-catalog@1.4.0 home-namespace
func catalogHomeNamespace(ret uint32)

// APIResource is one resource the cluster serves, at its group's
// preferred version (discovery's answer).
type APIResource struct {
	Group, Version, Kind string
	// Resource is the plural name.
	Resource string
	// Singular is "" when the cluster does not say.
	Singular   string
	ShortNames []string
	Namespaced bool
	// Verbs as discovery lists them: "get", "list", "create", ...
	Verbs []string
}

// VersionInfo is the API server's /version.
type VersionInfo struct{ Major, Minor, GitVersion string }

// Resources is every resource the cluster serves (with no API server:
// iar's built-in table). One host call; no grant.
func Resources() ([]APIResource, error) {
	ret := cabi.NewArea(12)
	cabi.NoGC(func() { catalogResources(uint32(ret)) })
	if ret.U8(0) != 0 {
		return nil, errors.New(ret.Str(4))
	}
	// api-resource: six (pointer, length) pairs for the strings and the
	// short names, a bool padded to 4, the verbs: 60 bytes, 4-aligned.
	rows := cabi.Area(ret.U32(4))
	out := make([]APIResource, ret.U32(8))
	for i := range out {
		at := uint32(i) * 60
		out[i] = APIResource{
			Group: rows.Str(at), Version: rows.Str(at + 8), Kind: rows.Str(at + 16),
			Resource: rows.Str(at + 24), Singular: rows.Str(at + 32),
			ShortNames: strs(rows, at+40),
			Namespaced: rows.U8(at+48) != 0,
			Verbs:      strs(rows, at+52),
		}
	}
	return out, nil
}

// strs lifts the list<string> whose (pointer, length) is at off.
func strs(a cabi.Area, off uint32) []string {
	items := cabi.Area(a.U32(off))
	out := make([]string, a.U32(off+4))
	for i := range out {
		out[i] = items.Str(uint32(i) * 8)
	}
	return out
}

// ServerVersion is the API server's version; an error (rule
// no-api-server) when there is none.
func ServerVersion() (VersionInfo, error) {
	ret := cabi.NewArea(28)
	cabi.NoGC(func() { catalogServerVersion(uint32(ret)) })
	if ret.U8(0) != 0 {
		return VersionInfo{}, errors.New(ret.Str(4))
	}
	return VersionInfo{Major: ret.Str(4), Minor: ret.Str(12), GitVersion: ret.Str(20)}, nil
}

// HomeNamespace is the namespace of the call's Backup or Restore: where
// the backup tool keeps its objects (Velero's Factory.Namespace()); ""
// in AppliesTo.
func HomeNamespace() string {
	ret := cabi.NewArea(8)
	cabi.NoGC(func() { catalogHomeNamespace(uint32(ret)) })
	return ret.Str(0)
}
