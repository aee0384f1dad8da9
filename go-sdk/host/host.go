// Package host is what iar's host offers a plugin (contract
// iar:plugin@1.4.0): its config, the log, reading the cluster
// (cluster-get, list, under the operator's read grant) and writing
// objects it creates for its operations (create, delete, under the write
// grant). Each call's rules are the host's; a refusal names its rule.
package host

import (
	"errors"
	"runtime"

	"iar.dev/sdk/internal/cabi"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// Level is a log line's severity (the contract's host.level).
type Level uint32

const (
	Trace Level = iota
	Debug
	Info
	Warn
	Error
)

//go:wasmimport iar:plugin/host@1.4.0 log
func hostLog(level, ptr, n uint32)

//go:wasmimport iar:plugin/host@1.4.0 config
func hostConfig(ptr, n, ret uint32)

//go:wasmimport iar:plugin/host@1.4.0 cluster-get
func hostClusterGet(gp, gn, rp, rn, np, nn, mp, mn, ret uint32)

// Log writes one line to the host log, tagged with the plugin's name.
func Log(level Level, message string) {
	p, n := cabi.Borrow(message)
	hostLog(uint32(level), p, n)
	keep(message)
}

// Config is the plugin's setting key, and whether it is set.
//
// Asked of the host once per key and instance, then kept (as the Rust
// SDK does): the host gives an instance a fixed configuration (a changed
// one reloads the plugin), and an action that reads its settings on every
// item would otherwise cross the boundary for each of them every time.
func Config(key string) (string, bool) {
	for _, s := range settings {
		if s.key == key {
			return s.value, s.ok
		}
	}
	value, ok := askConfig(key)
	settings = append(settings, setting{key, value, ok})
	return value, ok
}

// settings are the settings asked for so far: a few, in a list.
var settings []setting

type setting struct {
	key, value string
	ok         bool
}

func askConfig(key string) (string, bool) {
	ret := cabi.NewArea(12)
	p, n := cabi.Borrow(key)
	cabi.NoGC(func() { hostConfig(p, n, uint32(ret)) })
	keep(key)
	if ret.U8(0) == 0 {
		return "", false
	}
	return ret.Str(4), true
}

// ConfigOr is the setting key, or def when it is not set.
func ConfigOr(key, def string) string {
	if v, ok := Config(key); ok {
		return v
	}
	return def
}

// ClusterGet reads one object; nil when it does not exist. An error when
// the operator did not grant the read or the read failed.
func ClusterGet(id velero.ResourceIdentifier) (*unstructured.Unstructured, error) {
	ret := cabi.NewArea(16)
	a := idArgs(id)
	cabi.NoGC(func() { hostClusterGet(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], uint32(ret)) })
	keep(id)
	if ret.U8(0) != 0 {
		return nil, errors.New(ret.Str(4))
	}
	if ret.U8(4) == 0 {
		return nil, nil
	}
	return unstructured.FromJSON(ret.Str(8))
}

// idArgs flattens a resource-identifier into its four strings' pointers
// and lengths (borrowed: id is kept alive by the caller until the call
// returns).
func idArgs(id velero.ResourceIdentifier) [8]uint32 {
	var a [8]uint32
	for i, s := range []string{id.Group, id.Resource, id.Namespace, id.Name} {
		a[2*i], a[2*i+1] = cabi.Borrow(s)
	}
	return a
}

// keep holds v alive up to this point: a borrowed string's memory must
// outlive the import call that reads it.
func keep(v any) { runtime.KeepAlive(v) }

// Marshal is the JSON an object is sent to the host as.
func Marshal(v any) (string, error) {
	if u, ok := v.(*unstructured.Unstructured); ok {
		b, err := u.MarshalJSON()
		return string(b), err
	}
	b, err := unstructured.Marshal(v)
	return string(b), err
}
