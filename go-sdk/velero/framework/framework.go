// Package framework is Velero's plugin framework
// (github.com/vmware-tanzu/velero/pkg/plugin/framework) for iar: a plugin
// written against Velero's own interfaces and types (pkg/plugin/velero,
// its backupitemaction, restoreitemaction and itemblockaction packages,
// pkg/apis/velero/v1, apimachinery's unstructured items, a logrus
// FieldLogger) registers here as it registers with Velero, and iar's Go
// SDK exports it as the contract's interfaces.
//
// A port changes only its main package:
//
//	import (
//		"iar.dev/sdk/velero/framework"
//		_ "iar.dev/sdk/velero/framework/restoreitemaction" // exports restore-item-action
//	)
//
//	func init() { // was: func main()
//		framework.NewServer().
//			RegisterRestoreItemAction("velero.io/service", newServiceRestoreItemAction).
//			Serve()
//	}
//
//	func main() {}
//
// Two differences from Velero's framework follow from what a component is:
//
//   - A component runs its package initialisers when it is instantiated
//     and never main, so the registration moves into init().
//   - What a component exports is fixed when it is linked, not when it
//     runs: importing framework/backupitemaction, restoreitemaction or
//     itemblockaction is what exports that interface (as importing
//     iar.dev/sdk/backupaction does for the lightweight SDK).
//
// A component exports one action per interface. A server may register
// several of one kind (Velero's own server registers nineteen restore
// actions): the plugin setting `action` names the one this plugin runs,
// and with one registered it is that one. A component registering several
// kinds runs as the one `action` names: its exports of the other kinds
// then apply to nothing.
//
// Initializers run at the first call, as Velero runs them at the first
// call for a plugin name, with a logrus.FieldLogger whose lines go to the
// host log. Items reach the plugin as *unstructured.Unstructured decoded
// with encoding/json, and a returned item goes back as
// json.Marshal(item.UnstructuredContent()), exactly as Velero's gRPC
// servers do, so a port's outputs are the native plugin's bytes.
package framework

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"iar.dev/sdk/host"
	"iar.dev/sdk/velero"
)

// HandlerInitializer is Velero's common.HandlerInitializer (an alias of
// its underlying type, so Velero's named initializers are accepted as
// they are, without importing Velero's gRPC plumbing).
type HandlerInitializer = func(logger logrus.FieldLogger) (any, error)

// Server is the part of Velero's framework.Server a component can serve.
// Object stores, volume snapshotters and delete item actions have no
// interface in iar's contract: registering one is refused by Serve.
type Server interface {
	RegisterBackupItemAction(pluginName string, initializer HandlerInitializer) Server
	RegisterBackupItemActions(map[string]HandlerInitializer) Server
	RegisterBackupItemActionV2(pluginName string, initializer HandlerInitializer) Server
	RegisterBackupItemActionsV2(map[string]HandlerInitializer) Server
	RegisterRestoreItemAction(pluginName string, initializer HandlerInitializer) Server
	RegisterRestoreItemActions(map[string]HandlerInitializer) Server
	RegisterRestoreItemActionV2(pluginName string, initializer HandlerInitializer) Server
	RegisterRestoreItemActionsV2(map[string]HandlerInitializer) Server
	RegisterItemBlockAction(pluginName string, initializer HandlerInitializer) Server
	RegisterItemBlockActions(map[string]HandlerInitializer) Server
	RegisterDeleteItemAction(pluginName string, initializer HandlerInitializer) Server
	RegisterObjectStore(pluginName string, initializer HandlerInitializer) Server
	RegisterVolumeSnapshotter(pluginName string, initializer HandlerInitializer) Server
	// Serve ends the registration. It returns at once (the host calls
	// the exports; nothing is served from a process).
	Serve()
}

// kind is a registry of one interface of the contract.
type kind string

const (
	backupKind  kind = "BackupItemAction"
	restoreKind kind = "RestoreItemAction"
	blockKind   kind = "ItemBlockAction"
)

// registration is one plugin name of one kind: its initializer, and
// whether it was registered as Velero's v1 interface.
type registration struct {
	name string
	v1   bool
	init HandlerInitializer
}

var (
	registry = map[kind][]registration{}
	// refused are registrations of kinds the contract has no interface
	// for, reported by every call (a plugin must not silently lose one).
	refused []string
	served  bool
)

type server struct{}

// NewServer is Velero's framework.NewServer.
func NewServer() Server { return server{} }

func add(k kind, name string, v1 bool, init HandlerInitializer) {
	registry[k] = append(registry[k], registration{name: name, v1: v1, init: init})
}

func addAll(k kind, v1 bool, m map[string]HandlerInitializer) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		add(k, n, v1, m[n])
	}
}

func (s server) RegisterBackupItemAction(n string, i HandlerInitializer) Server {
	add(backupKind, n, true, i)
	return s
}

func (s server) RegisterBackupItemActions(m map[string]HandlerInitializer) Server {
	addAll(backupKind, true, m)
	return s
}

func (s server) RegisterBackupItemActionV2(n string, i HandlerInitializer) Server {
	add(backupKind, n, false, i)
	return s
}

func (s server) RegisterBackupItemActionsV2(m map[string]HandlerInitializer) Server {
	addAll(backupKind, false, m)
	return s
}

func (s server) RegisterRestoreItemAction(n string, i HandlerInitializer) Server {
	add(restoreKind, n, true, i)
	return s
}

func (s server) RegisterRestoreItemActions(m map[string]HandlerInitializer) Server {
	addAll(restoreKind, true, m)
	return s
}

func (s server) RegisterRestoreItemActionV2(n string, i HandlerInitializer) Server {
	add(restoreKind, n, false, i)
	return s
}

func (s server) RegisterRestoreItemActionsV2(m map[string]HandlerInitializer) Server {
	addAll(restoreKind, false, m)
	return s
}

func (s server) RegisterItemBlockAction(n string, i HandlerInitializer) Server {
	add(blockKind, n, false, i)
	return s
}

func (s server) RegisterItemBlockActions(m map[string]HandlerInitializer) Server {
	addAll(blockKind, false, m)
	return s
}

func (s server) RegisterDeleteItemAction(n string, _ HandlerInitializer) Server {
	refused = append(refused, "DeleteItemAction "+n)
	return s
}

func (s server) RegisterObjectStore(n string, _ HandlerInitializer) Server {
	refused = append(refused, "ObjectStore "+n)
	return s
}

func (s server) RegisterVolumeSnapshotter(n string, _ HandlerInitializer) Server {
	refused = append(refused, "VolumeSnapshotter "+n)
	return s
}

func (server) Serve() { served = true }

// ActionSetting is the plugin setting that names which registered action
// of a kind this component runs, when more than one is registered.
const ActionSetting = "action"

// instance is the action of kind k this component runs: chosen by the
// setting `action` (or the only one registered), initialized once.
type instance struct {
	k    kind
	done bool
	name string
	v1   bool
	impl any
	err  error
}

// nothing is the selector that matches no item: every resource excluded
// (Velero's semantics, as iar's).
var nothing = velero.ResourceSelector{ExcludedResources: []string{"*"}}

// namedElsewhere is true when the setting `action` names no registered
// action of this kind but one of another: a component registering
// Velero's backup and restore built-ins runs as one of them, and its
// other exports then apply to nothing rather than fail the plugin.
func (in *instance) namedElsewhere() bool {
	want, set := host.Config(ActionSetting)
	if !set {
		return false
	}
	found := func(k kind) bool {
		return slices.ContainsFunc(registry[k], func(r registration) bool { return r.name == want })
	}
	if found(in.k) {
		return false
	}
	for _, k := range []kind{backupKind, restoreKind, blockKind} {
		if k != in.k && found(k) {
			return true
		}
	}
	return false
}

func (in *instance) get() (any, error) {
	if in.done {
		return in.impl, in.err
	}
	in.done = true
	in.impl, in.err = in.resolve()
	return in.impl, in.err
}

func (in *instance) resolve() (any, error) {
	if len(refused) > 0 {
		return nil, fmt.Errorf("registered plugin kinds iar's contract has no interface for: %s", strings.Join(refused, ", "))
	}
	if !served {
		return nil, fmt.Errorf("no %s registered: call framework.NewServer().Register...().Serve() from init() (a component never runs main)", in.k)
	}
	regs := registry[in.k]
	names := make([]string, len(regs))
	for i, r := range regs {
		names[i] = r.name
	}
	want, set := host.Config(ActionSetting)
	var chosen *registration
	switch {
	case set:
		for i := range regs {
			if regs[i].name == want {
				chosen = &regs[i]
			}
		}
		if chosen == nil {
			return nil, fmt.Errorf("setting %s=%q names no registered %s (registered: %s)", ActionSetting, want, in.k, strings.Join(names, ", "))
		}
	case len(regs) == 1:
		chosen = &regs[0]
	case len(regs) == 0:
		return nil, fmt.Errorf("this component exports %s but registers none", in.k)
	default:
		return nil, fmt.Errorf("%d %ss registered (%s): a component runs one; name it with the plugin setting %q", len(regs), in.k, strings.Join(names, ", "), ActionSetting)
	}
	in.name, in.v1 = chosen.name, chosen.v1
	impl, err := chosen.init(newLogger().WithField("cmd", chosen.name))
	if err != nil {
		return nil, fmt.Errorf("initializing %s %s: %w", in.k, chosen.name, err)
	}
	if impl == nil {
		return nil, fmt.Errorf("initializing %s %s: the initializer returned nil", in.k, chosen.name)
	}
	return impl, nil
}
