// Command restore-builtins is Velero v1.18.3's own built-in restore item
// actions (github.com/vmware-tanzu/velero/pkg/restore/actions, fetched from
// the Go module proxy at build time, compiled unchanged) served two ways
// from this one main package:
//
//   - for GOOS=wasip1 (component.go): registered with iar's port of Velero's
//     framework (iar.dev/sdk/velero/framework), built into an iar component
//     by ../../build.sh;
//   - natively (native.go): registered with Velero's own framework and called
//     through Velero's own gRPC server and client, in-process, on the inputs
//     given on the command line; what the component is compared against.
//
// This is a module of its own, not a package of the framework's module:
// Velero's restore actions pull in client-go, controller-runtime and
// Velero's internal hook code, which a plugin of the framework need not
// resolve, and this module alone is built with the `replace` of Velero's
// module that ../../build.sh makes (see there): the framework's module is
// left as every plugin uses it.
package main

import (
	"github.com/sirupsen/logrus"

	ria "github.com/vmware-tanzu/velero/pkg/restore/actions"
)

// restoreActions are the built-in restore item actions Velero's server
// registers (pkg/cmd/server/plugin/plugin.go) that need no Kubernetes
// client, under Velero's names and built by Velero's constructors, as
// plugin.go's initializers build them. The ones that need a client
// (change-storage-class, change-image-name, secret, pvc, dataupload) and
// pod-volume-restore (which needs a client and whose file cannot target
// wasip1) are not here.
var restoreActions = map[string]func(logrus.FieldLogger) (any, error){
	"velero.io/job":                             func(l logrus.FieldLogger) (any, error) { return ria.NewJobAction(l), nil },
	"velero.io/pod":                             func(l logrus.FieldLogger) (any, error) { return ria.NewPodAction(l), nil },
	"velero.io/init-restore-hook":               func(l logrus.FieldLogger) (any, error) { return ria.NewInitRestoreHookPodAction(l), nil },
	"velero.io/service":                         func(l logrus.FieldLogger) (any, error) { return ria.NewServiceAction(l), nil },
	"velero.io/service-account":                 func(l logrus.FieldLogger) (any, error) { return ria.NewServiceAccountAction(l), nil },
	"velero.io/add-pvc-from-pod":                func(l logrus.FieldLogger) (any, error) { return ria.NewAddPVCFromPodAction(l), nil },
	"velero.io/role-bindings":                   func(l logrus.FieldLogger) (any, error) { return ria.NewRoleBindingAction(l), nil },
	"velero.io/cluster-role-bindings":           func(l logrus.FieldLogger) (any, error) { return ria.NewClusterRoleBindingAction(l), nil },
	"velero.io/crd-preserve-fields":             func(l logrus.FieldLogger) (any, error) { return ria.NewCRDV1PreserveUnknownFieldsAction(l), nil },
	"velero.io/apiservice":                      func(l logrus.FieldLogger) (any, error) { return ria.NewAPIServiceAction(l), nil },
	"velero.io/admission-webhook-configuration": func(l logrus.FieldLogger) (any, error) { return ria.NewAdmissionWebhookConfigurationAction(l), nil },
}
