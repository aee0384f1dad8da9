// Command velero-anchor drives a Velero BackupItemAction v2 plugin through
// Velero's own client side (pkg/plugin/clientmgmt: the registry that
// discovers plugin binaries in a directory, the manager that starts them as
// restartable processes over hashicorp/go-plugin gRPC) and times it:
// plugin process start-up, and Execute on one item (median, p99, calls/s).
//
// Usage: velero-anchor drive   (settings in the environment, so that no
// argument leaks to the processes Velero starts, which get os.Args[2:])
//
//	ANCHOR_PLUGIN_DIR  directory holding the plugin binary
//	ANCHOR_ITEM        a JSON file holding the item
//	ANCHOR_ITERATIONS  Execute calls timed (default 2000)
//	ANCHOR_STARTS      plugin start-ups timed (default 20)
//	ANCHOR_ACTION      the action to drive (default iar.bench/labels, whose
//	                   result is checked: team=payments); a v1 action is
//	                   adapted by Velero's manager, as Velero's server does
//
// Velero's registry also runs its own executable with `run-plugins` to
// discover the plugins compiled into it, as the velero server does: in
// that mode this command serves no plugin.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/clientmgmt"
	"github.com/vmware-tanzu/velero/pkg/plugin/clientmgmt/process"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
)

const benchLabels = "iar.bench/labels"

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fail(fmt.Errorf("%s=%q: not a positive number", name, v))
		}
		return n
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "velero-anchor:", err)
	os.Exit(1)
}

type row struct {
	Median    float64 `json:"median_us"`
	P99       float64 `json:"p99_us"`
	PerSecond float64 `json:"per_second"`
	N         int     `json:"n"`
}

func summarize(times []time.Duration, total time.Duration) row {
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	at := func(q float64) float64 {
		i := int(float64(len(times)-1)*q + 0.5)
		return float64(times[i].Nanoseconds()) / 1e3
	}
	return row{Median: at(0.5), P99: at(0.99), PerSecond: float64(len(times)) / total.Seconds(), N: len(times)}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run-plugins" {
		framework.NewServer().Serve()
		return
	}
	if len(os.Args) != 2 || os.Args[1] != "drive" {
		fail(fmt.Errorf("usage: %s drive (see the source for the environment)", os.Args[0]))
	}
	dir := os.Getenv("ANCHOR_PLUGIN_DIR")
	itemPath := os.Getenv("ANCHOR_ITEM")
	if dir == "" || itemPath == "" {
		fail(fmt.Errorf("ANCHOR_PLUGIN_DIR and ANCHOR_ITEM are required"))
	}
	iterations := envInt("ANCHOR_ITERATIONS", 2000)
	starts := envInt("ANCHOR_STARTS", 20)
	pluginName := os.Getenv("ANCHOR_ACTION")
	if pluginName == "" {
		pluginName = benchLabels
	}

	text, err := os.ReadFile(itemPath)
	if err != nil {
		fail(err)
	}
	logger := logrus.New()
	logger.SetLevel(logrus.WarnLevel)
	logger.SetOutput(os.Stderr)
	level := logrus.WarnLevel

	backup := &api.Backup{
		TypeMeta:   metav1.TypeMeta{APIVersion: "velero.io/v1", Kind: "Backup"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "velero", Name: "bench", UID: "00000000-0000-0000-0000-000000000000"},
		Status:     api.BackupStatus{Phase: api.BackupPhaseInProgress},
	}
	newItem := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(text); err != nil {
			fail(fmt.Errorf("%s: %w", itemPath, err))
		}
		return u
	}

	// Discovery, once, as the velero server does at start.
	registry := process.NewRegistry(dir, logger, level)
	if err := registry.DiscoverPlugins(); err != nil {
		fail(fmt.Errorf("discovering plugins in %s: %w", dir, err))
	}

	// Start-up: a new manager starts the plugin's process (fork/exec, the
	// go-plugin handshake, the gRPC connection, dispensing the action); the
	// first Execute is included, as iar's start-up row includes its first
	// call on a new instance.
	var startTimes []time.Duration
	startAll := time.Now()
	for i := 0; i < starts; i++ {
		item := newItem()
		t := time.Now()
		m := clientmgmt.NewManager(logger, level, registry)
		action, err := m.GetBackupItemActionV2(pluginName)
		if err != nil {
			fail(fmt.Errorf("starting %s: %w", pluginName, err))
		}
		if _, _, _, _, err := action.Execute(item, backup); err != nil {
			fail(fmt.Errorf("execute: %w", err))
		}
		startTimes = append(startTimes, time.Since(t))
		m.CleanupClients()
	}
	start := summarize(startTimes, time.Since(startAll))

	m := clientmgmt.NewManager(logger, level, registry)
	defer m.CleanupClients()
	action, err := m.GetBackupItemActionV2(pluginName)
	if err != nil {
		fail(fmt.Errorf("starting %s: %w", pluginName, err))
	}
	// Items are prepared outside the timed region: the caller holds the
	// item parsed (as iar's caller holds an Item), and Execute's client
	// side marshals it to JSON, the server unmarshals, runs the action,
	// marshals, and the client unmarshals the result.
	items := make([]*unstructured.Unstructured, 0, 64)
	for i := 0; i < 64; i++ {
		items = append(items, newItem())
	}
	for i := 0; i < 50; i++ { // warm-up
		if _, _, _, _, err := action.Execute(items[i%len(items)], backup); err != nil {
			fail(err)
		}
	}
	var times []time.Duration
	var last map[string]any
	all := time.Now()
	for i := 0; i < iterations; i++ {
		item := items[i%len(items)]
		t := time.Now()
		out, _, _, _, err := action.Execute(item, backup)
		times = append(times, time.Since(t))
		if err != nil {
			fail(fmt.Errorf("execute: %w", err))
		}
		last = out.UnstructuredContent()
	}
	exec := summarize(times, time.Since(all))
	labels, _, _ := unstructured.NestedStringMap(last, "metadata", "labels")
	if pluginName == benchLabels && labels["team"] != "payments" {
		fail(fmt.Errorf("the plugin did not set team=payments: %v", labels))
	}
	out, _ := json.Marshal(map[string]any{"execute": exec, "startup": start, "item_bytes": len(text)})
	fmt.Println(string(out))
}
