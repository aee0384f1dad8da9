//go:build wasip1

// Command pod is Velero's backup PodAction alone (pkg/backup/actions,
// unchanged) as an iar component: the measure of what a component of one
// action costs beside ../ (every built-in in one), which links client-go's
// clientset and controller-runtime for the actions that take a client.
// Velero's NewPodAction takes none, so neither is linked here
// (bench/velero-builtins.sh compares the two).
package main

import (
	"github.com/sirupsen/logrus"
	bia "github.com/vmware-tanzu/velero/pkg/backup/actions"

	"iar.dev/sdk/velero/framework"
	_ "iar.dev/sdk/velero/framework/backupitemaction" // exports item-action
)

func init() {
	framework.NewServer().
		RegisterBackupItemAction("velero.io/pod", func(l logrus.FieldLogger) (any, error) { return bia.NewPodAction(l), nil }).
		Serve()
}

func main() {}
