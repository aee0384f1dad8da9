//go:build !wasip1

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"

	goplugin "github.com/hashicorp/go-plugin"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	veleroclient "github.com/vmware-tanzu/velero/pkg/client"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	riav1 "github.com/vmware-tanzu/velero/pkg/plugin/velero/restoreitemaction/v1"
)

const usage = `usage: velero-builtins-native -action NAME -restore RESTORE.json [-item ITEM.json] ITEM_FROM_BACKUP.json
       velero-builtins-native -action NAME -backup BACKUP.json [-iterations N] ITEM.json

Runs one of Velero's built-in restore item actions natively, as Velero's
server calls a plugin: registered with Velero's framework
(framework.NewRestoreItemActionPlugin, common.ServerMux), called through
Velero's own gRPC client (RestoreItemActionGRPCClient) and server
(RestoreItemActionGRPCServer) over an in-process connection, which is
everything of Velero's plugin path but the plugin process and go-plugin's
handshake. Prints one JSON object: {"item", "additionalItems",
"skipRestore"}, or {"error"} when the action fails.

ITEM_FROM_BACKUP is the object as backed up. The item handed to the action
is what Velero's restore hands it (pkg/restore/restore.go, restoreItem:
resetMetadataAndStatus), or ITEM.json when -item is given.

The actions that read the cluster get their clients from Velero's own
client.NewFactory, as Velero's server does: the cluster KUBECONFIG names,
the namespace VELERO_NAMESPACE names (default velero).

With -backup, one of Velero's built-in backup item actions runs on ITEM
through Velero's BackupItemAction gRPC client and server
(native_backup.go); it prints {"item", "additionalItems"} or {"error"}.

Started by Velero's plugin manager (go-plugin's handshake), it serves the
actions as a Velero plugin process (native_serve.go).
`

func main() {
	action := flag.String("action", "", "the registered action to call (velero.io/service, ...)")
	restorePath := flag.String("restore", "", "the Velero Restore object (JSON)")
	itemPath := flag.String("item", "", "the item as handed to the action (JSON); default: ITEM_FROM_BACKUP as Velero's restore resets it")
	backupPath := flag.String("backup", "", "the Velero Backup object (JSON): call a backup item action")
	iterations := flag.Int("iterations", 0, "with -backup: repeat the call this many times and print its timing")
	flag.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	if launchedByVelero() {
		serve()
		return
	}
	flag.Parse()
	if *action != "" && *backupPath != "" && *restorePath == "" && flag.NArg() == 1 {
		backupMain(*action, *backupPath, flag.Arg(0), *iterations)
		return
	}
	if *action == "" || *restorePath == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	fromBackup := readItem(flag.Arg(0))
	var item *unstructured.Unstructured
	if *itemPath != "" {
		item = readItem(*itemPath)
	} else {
		item = fromBackup.DeepCopy()
		if err := resetMetadataAndStatus(item); err != nil {
			fail(fmt.Errorf("%s: %w", flag.Arg(0), err))
		}
	}
	restore := &api.Restore{}
	if err := json.Unmarshal(read(*restorePath), restore); err != nil {
		fail(fmt.Errorf("%s: %w", *restorePath, err))
	}

	impl, err := grpcClient(stderrLogger(), *action)
	if err != nil {
		fail(err)
	}
	out, err := impl.Execute(&velero.RestoreItemActionExecuteInput{
		Item:           item,
		ItemFromBackup: fromBackup,
		Restore:        restore,
	})
	result := map[string]any{}
	if err != nil {
		result["error"] = err.Error()
	} else {
		result["item"] = out.UpdatedItem.UnstructuredContent()
		result["additionalItems"] = identifiers(out.AdditionalItems)
		result["skipRestore"] = out.SkipRestore
	}
	print(result)
}

func stderrLogger() logrus.FieldLogger {
	logger := logrus.New()
	logger.Out = os.Stderr
	return logger
}

// identifiers as the test compares them.
func identifiers(in []velero.ResourceIdentifier) []map[string]string {
	ids := make([]map[string]string, 0, len(in))
	for _, id := range in {
		ids = append(ids, map[string]string{
			"group": id.Group, "resource": id.Resource, "namespace": id.Namespace, "name": id.Name,
		})
	}
	return ids
}

func print(result map[string]any) {
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		fail(err)
	}
}

// grpcClient is the restore action `name` as Velero's server reaches a
// plugin's restore item action: Velero's gRPC client for it, talking to
// Velero's gRPC server for the registered actions.
func grpcClient(logger logrus.FieldLogger, name string) (riav1.RestoreItemAction, error) {
	plugin := framework.NewRestoreItemActionPlugin(common.ServerLogger(logger), common.ClientLogger(logger))
	client, err := dispense(plugin, restoreActions(veleroFactory()), name)
	if err != nil {
		return nil, err
	}
	impl, ok := client.(riav1.RestoreItemAction)
	if !ok {
		return nil, fmt.Errorf("velero's client for %s is not a RestoreItemAction", name)
	}
	return impl, nil
}

// veleroFactory is Velero's own client.Factory, as Velero's server makes
// it (KUBECONFIG, VELERO_NAMESPACE).
func veleroFactory() veleroclient.Factory {
	return veleroclient.NewFactory("velero", veleroclient.VeleroConfig{})
}

// servedPlugin is Velero's plugin of one kind: a mux of registered
// actions, served and called over gRPC.
type servedPlugin interface {
	Register(name string, initializer common.HandlerInitializer)
	GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error
	GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error)
}

// dispense registers `actions` with `p`, serves it over an in-process
// connection and returns Velero's gRPC client for `name`.
func dispense(p servedPlugin, actions map[string]initializer, name string) (any, error) {
	names := make([]string, 0, len(actions))
	for n := range actions {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p.Register(n, actions[n])
	}
	if !slices.Contains(names, name) {
		return nil, fmt.Errorf("no action %q registered (registered: %v)", name, names)
	}
	listener := bufconn.Listen(1 << 20)
	server := grpc.NewServer()
	if err := p.GRPCServer(nil, server); err != nil {
		return nil, err
	}
	go func() { _ = server.Serve(listener) }()
	conn, err := grpc.NewClient("passthrough:///in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return listener.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	dispenser, err := p.GRPCClient(context.Background(), nil, conn)
	if err != nil {
		return nil, err
	}
	return dispenser.(common.ClientDispenser).ClientFor(name), nil
}

// resetMetadataAndStatus is what Velero's restore does to an item before
// its restore item actions see it (pkg/restore/restore.go v1.18.3,
// resetMetadata and resetStatus, unexported there, so repeated here).
func resetMetadataAndStatus(obj *unstructured.Unstructured) error {
	res, ok := obj.Object["metadata"]
	if !ok {
		return fmt.Errorf("metadata not found")
	}
	metadata, ok := res.(map[string]any)
	if !ok {
		return fmt.Errorf("metadata was of type %T, expected map[string]any", res)
	}
	for k := range metadata {
		switch k {
		case "generateName", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
			"deletionGracePeriodSeconds", "ownerReferences":
			delete(metadata, k)
		}
	}
	unstructured.RemoveNestedField(obj.UnstructuredContent(), "status")
	return nil
}

// readItem decodes an object as Velero's restore decodes a backed-up item
// (json.Unmarshal into an Unstructured).
func readItem(path string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(read(path), obj); err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
	return obj
}

func read(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	return b
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "velero-builtins-native:", err)
	os.Exit(1)
}
