//go:build !wasip1

package main

import (
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework"
)

// launchedByVelero is whether Velero's plugin manager started this
// process: go-plugin's handshake cookie, Velero's value.
func launchedByVelero() bool {
	return os.Getenv("VELERO_PLUGIN") == "hello"
}

// serve serves the built-ins as Velero's server serves its own (`velero
// run-plugins`): a plugin process behind go-plugin's handshake, the
// backup actions registered as v1, as pkg/cmd/server/plugin/plugin.go
// registers them. The benchmark's native row (bench/velero-builtins.sh)
// calls them here through Velero's plugin manager, process hop included.
func serve() {
	f := veleroFactory()
	s := framework.NewServer().BindFlags(pflag.CommandLine)
	for _, name := range sorted(backupActions(f)) {
		s = s.RegisterBackupItemAction(name, backupActions(f)[name])
	}
	for _, name := range sorted(restoreActions(f)) {
		s = s.RegisterRestoreItemAction(name, restoreActions(f)[name])
	}
	s.Serve()
}

func sorted(m map[string]initializer) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, strings.Compare)
	return names
}
