// Command velero-client drives plugin binaries through Velero's own client
// side (pkg/plugin/clientmgmt: the registry that discovers the executables
// of a plugin directory, the manager that starts them over hashicorp
// go-plugin gRPC and dispenses restartable actions), exactly as the Velero
// server does, and prints what each call returned. iar's tests use it to
// check the `iar` binary as a Velero plugin with Velero's code, not iar's
// reading of it.
//
// Usage: velero-client SCRIPT.json
//
// SCRIPT is a JSON list of steps; the output is a JSON list with one result
// per step, in order (an error is a result: {"error": "..."}):
//
//	{"op": "list"}                                  BackupItemActionV2 names
//	{"op": "listKinds"}                             names per kind iar serves
//	{"op": "blockAppliesTo", "action": A}           an ItemBlockAction's selector
//	{"op": "relatedItems", "action": A, "item": {...}, "backup": {...}}
//	{"op": "appliesTo", "action": A}                the action's selector
//	{"op": "execute", "action": A, "item": {...}, "backup": {...}}
//	{"op": "progress", "action": A, "operationID": ID, "backup": {...}}
//	{"op": "cancel", "action": A, "operationID": ID, "backup": {...}}
//	{"op": "restoreAppliesTo", "action": A}         a RestoreItemActionV2's selector
//	{"op": "restoreExecute", "action": A, "item": {...}, "itemFromBackup": {...}, "restore": {...}}
//	{"op": "restoreProgress", "action": A, "operationID": ID, "restore": {...}}
//	{"op": "restoreCancel", "action": A, "operationID": ID, "restore": {...}}
//	{"op": "itemsReady", "action": A, "additionalItems": [...], "restore": {...}}
//	{"op": "restart"}   a new manager: new plugin processes, as Velero starts
//	                    for each backup and each operations reconcile
//	{"op": "write", "path": P, "text": T}   writes a file, as an operator
//	                    replacing a plugin's settings while Velero runs
//	{"op": "repeat", "count": N, "step": {...}}   the step N times; the
//	                    result is the last one and how many failed
//
// The plugin directory is $CLIENT_PLUGIN_DIR; $CLIENT_LOG_LEVEL=debug shows
// what the plugin processes log. Velero's registry also runs
// this executable with `run-plugins` to discover the plugins compiled into
// it, as the velero server does: in that mode it serves none.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/clientmgmt"
	"github.com/vmware-tanzu/velero/pkg/plugin/clientmgmt/process"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
)

type step struct {
	Op          string          `json:"op"`
	Action      string          `json:"action"`
	Item        json.RawMessage `json:"item"`
	Backup      json.RawMessage `json:"backup"`
	OperationID string          `json:"operationID"`
	Count       int             `json:"count"`
	Step        *step           `json:"step"`
	Path        string          `json:"path"`
	Text        string          `json:"text"`
	// Restore steps: the item as backed up (defaults to "item"), the
	// Restore, and the identifiers asked about in itemsReady.
	ItemFromBackup  json.RawMessage             `json:"itemFromBackup"`
	Restore         json.RawMessage             `json:"restore"`
	AdditionalItems []velero.ResourceIdentifier `json:"additionalItems"`
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "velero-client:", err)
	os.Exit(1)
}

type runner struct {
	logger   logrus.FieldLogger
	level    logrus.Level
	registry process.Registry
	manager  clientmgmt.Manager
}

func (r *runner) backup(raw json.RawMessage) (*api.Backup, error) {
	b := &api.Backup{}
	if len(raw) == 0 {
		raw = []byte(`{"apiVersion":"velero.io/v1","kind":"Backup","metadata":{"namespace":"velero","name":"harness","uid":"00000000-0000-0000-0000-0000000000aa"},"status":{"phase":"InProgress"}}`)
	}
	if err := json.Unmarshal(raw, b); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	return b, nil
}

func errResult(err error) map[string]any {
	return map[string]any{"error": err.Error()}
}

func (r *runner) run(s step) map[string]any {
	switch s.Op {
	case "list":
		var names []string
		for _, id := range r.registry.List(common.PluginKindBackupItemActionV2) {
			names = append(names, id.Name)
		}
		sort.Strings(names)
		return map[string]any{"names": names}
	case "listKinds":
		kinds := map[string][]string{}
		for _, kind := range []common.PluginKind{common.PluginKindBackupItemActionV2, common.PluginKindItemBlockAction, common.PluginKindRestoreItemActionV2} {
			names := []string{}
			for _, id := range r.registry.List(kind) {
				names = append(names, id.Name)
			}
			sort.Strings(names)
			kinds[string(kind)] = names
		}
		return map[string]any{"kinds": kinds}
	case "blockAppliesTo", "relatedItems":
		return r.block(s)
	case "restoreAppliesTo", "restoreExecute", "restoreProgress", "restoreCancel", "itemsReady":
		return r.restore(s)
	case "restart":
		r.manager.CleanupClients()
		r.manager = clientmgmt.NewManager(r.logger, r.level, r.registry)
		return map[string]any{}
	case "write":
		if err := os.WriteFile(s.Path, []byte(s.Text), 0o644); err != nil {
			return errResult(err)
		}
		return map[string]any{}
	case "repeat":
		if s.Step == nil || s.Count < 1 {
			return errResult(fmt.Errorf("repeat needs a step and a count"))
		}
		var last map[string]any
		failed := 0
		for i := 0; i < s.Count; i++ {
			last = r.run(*s.Step)
			if _, bad := last["error"]; bad {
				failed++
			}
		}
		return map[string]any{"last": last, "failed": failed, "count": s.Count}
	}
	action, err := r.manager.GetBackupItemActionV2(s.Action)
	if err != nil {
		return errResult(err)
	}
	switch s.Op {
	case "appliesTo":
		sel, err := action.AppliesTo()
		if err != nil {
			return errResult(err)
		}
		return map[string]any{"selector": sel}
	case "execute":
		item := &unstructured.Unstructured{}
		if err := item.UnmarshalJSON(s.Item); err != nil {
			return errResult(fmt.Errorf("item: %w", err))
		}
		backup, err := r.backup(s.Backup)
		if err != nil {
			return errResult(err)
		}
		out, additional, opID, post, err := action.Execute(item, backup)
		if err != nil {
			return errResult(err)
		}
		return map[string]any{
			"item":               out.UnstructuredContent(),
			"additionalItems":    additional,
			"operationID":        opID,
			"postOperationItems": post,
		}
	case "progress":
		backup, err := r.backup(s.Backup)
		if err != nil {
			return errResult(err)
		}
		p, err := action.Progress(s.OperationID, backup)
		if err != nil {
			return errResult(err)
		}
		return map[string]any{"progress": p}
	case "cancel":
		backup, err := r.backup(s.Backup)
		if err != nil {
			return errResult(err)
		}
		if err := action.Cancel(s.OperationID, backup); err != nil {
			return errResult(err)
		}
		return map[string]any{"canceled": true}
	}
	return errResult(fmt.Errorf("unknown op %q", s.Op))
}

// block runs the ItemBlockAction calls, through the manager as Velero's
// item collector does.
func (r *runner) block(s step) map[string]any {
	action, err := r.manager.GetItemBlockAction(s.Action)
	if err != nil {
		return errResult(err)
	}
	if s.Op == "blockAppliesTo" {
		sel, err := action.AppliesTo()
		if err != nil {
			return errResult(err)
		}
		return map[string]any{"selector": sel}
	}
	item := &unstructured.Unstructured{}
	if err := item.UnmarshalJSON(s.Item); err != nil {
		return errResult(fmt.Errorf("item: %w", err))
	}
	backup, err := r.backup(s.Backup)
	if err != nil {
		return errResult(err)
	}
	related, err := action.GetRelatedItems(item, backup)
	if err != nil {
		return errResult(err)
	}
	return map[string]any{"relatedItems": related}
}

func (r *runner) restoreObject(raw json.RawMessage) (*api.Restore, error) {
	rs := &api.Restore{}
	if len(raw) == 0 {
		raw = []byte(`{"apiVersion":"velero.io/v1","kind":"Restore","metadata":{"namespace":"velero","name":"harness-restore","uid":"00000000-0000-0000-0000-0000000000bb"},"spec":{"backupName":"harness"},"status":{"phase":"InProgress"}}`)
	}
	if err := json.Unmarshal(raw, rs); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return rs, nil
}

// restore runs the RestoreItemActionV2 calls, through the manager as
// Velero's restore controller does.
func (r *runner) restore(s step) map[string]any {
	action, err := r.manager.GetRestoreItemActionV2(s.Action)
	if err != nil {
		return errResult(err)
	}
	if s.Op == "restoreAppliesTo" {
		sel, err := action.AppliesTo()
		if err != nil {
			return errResult(err)
		}
		return map[string]any{"selector": sel}
	}
	restore, err := r.restoreObject(s.Restore)
	if err != nil {
		return errResult(err)
	}
	switch s.Op {
	case "restoreExecute":
		item := &unstructured.Unstructured{}
		if err := item.UnmarshalJSON(s.Item); err != nil {
			return errResult(fmt.Errorf("item: %w", err))
		}
		fromBackup := item.DeepCopy()
		if len(s.ItemFromBackup) > 0 {
			fromBackup = &unstructured.Unstructured{}
			if err := fromBackup.UnmarshalJSON(s.ItemFromBackup); err != nil {
				return errResult(fmt.Errorf("itemFromBackup: %w", err))
			}
		}
		out, err := action.Execute(&velero.RestoreItemActionExecuteInput{
			Item:           item,
			ItemFromBackup: fromBackup,
			Restore:        restore,
		})
		if err != nil {
			return errResult(err)
		}
		return map[string]any{
			"item":                        out.UpdatedItem.UnstructuredContent(),
			"additionalItems":             out.AdditionalItems,
			"skipRestore":                 out.SkipRestore,
			"operationID":                 out.OperationID,
			"waitForAdditionalItems":      out.WaitForAdditionalItems,
			"additionalItemsReadyTimeout": out.AdditionalItemsReadyTimeout.String(),
		}
	case "restoreProgress":
		p, err := action.Progress(s.OperationID, restore)
		if err != nil {
			return errResult(err)
		}
		return map[string]any{"progress": p}
	case "restoreCancel":
		if err := action.Cancel(s.OperationID, restore); err != nil {
			return errResult(err)
		}
		return map[string]any{"canceled": true}
	}
	ready, err := action.AreAdditionalItemsReady(s.AdditionalItems, restore)
	if err != nil {
		return errResult(err)
	}
	return map[string]any{"ready": ready}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run-plugins" {
		framework.NewServer().Serve()
		return
	}
	if len(os.Args) != 2 {
		fail(fmt.Errorf("usage: %s SCRIPT.json (see the source)", os.Args[0]))
	}
	dir := os.Getenv("CLIENT_PLUGIN_DIR")
	if dir == "" {
		fail(fmt.Errorf("CLIENT_PLUGIN_DIR is required"))
	}
	text, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err)
	}
	var steps []step
	if err := json.Unmarshal(text, &steps); err != nil {
		fail(fmt.Errorf("%s: %w", os.Args[1], err))
	}
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	level := logrus.InfoLevel
	if l, err := logrus.ParseLevel(os.Getenv("CLIENT_LOG_LEVEL")); err == nil {
		// The plugin processes' own log lines are logged at debug.
		level = l
	}
	logger.SetLevel(level)

	// Discovery, once, as the velero server does at start.
	registry := process.NewRegistry(dir, logger, level)
	if err := registry.DiscoverPlugins(); err != nil {
		fail(fmt.Errorf("discovering plugins in %s: %w", dir, err))
	}
	r := &runner{logger: logger, level: level, registry: registry}
	r.manager = clientmgmt.NewManager(logger, level, registry)
	results := make([]map[string]any, 0, len(steps))
	for _, s := range steps {
		results = append(results, r.run(s))
	}
	r.manager.CleanupClients()
	out, err := json.Marshal(results)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}
