// Command velero-builtins is Velero v1.18.3's own built-in restore item
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
// The actions that read the cluster take their clients from Velero's
// client.Factory, as Velero's server builds them; only the factory is the
// main's own choice (component.go, native.go).
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

	bia "github.com/vmware-tanzu/velero/pkg/backup/actions"
	"github.com/vmware-tanzu/velero/pkg/client"
	velerodiscovery "github.com/vmware-tanzu/velero/pkg/discovery"
	ria "github.com/vmware-tanzu/velero/pkg/restore/actions"
	"github.com/vmware-tanzu/velero/pkg/util/actionhelpers"
)

// initializer is Velero's plugin initializer type (common.HandlerInitializer).
type initializer = func(logrus.FieldLogger) (any, error)

// restoreActions are the built-in restore item actions Velero's server
// registers (pkg/cmd/server/plugin/plugin.go), under Velero's names and
// built by Velero's constructors as plugin.go's initializers build them:
// those that need no Kubernetes client, and those that take their clients
// from Velero's client.Factory `f` (ChangeStorageClass and ChangeImageName
// read their ConfigMaps in f.Namespace(), the PVC action also Nodes, the
// Secret action lists ServiceAccounts through a controller-runtime
// client). The component passes iar's factory (clientfactory.New(), over
// the host), the native build Velero's own (client.NewFactory, over a
// kubeconfig): the same initializers, only the factory differs.
// pod-volume-restore is not here: its file cannot target wasip1 (see
// ../../build.sh).
func restoreActions(f client.Factory) map[string]initializer {
	return map[string]initializer{
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
		"velero.io/change-storage-class": func(l logrus.FieldLogger) (any, error) {
			kube, err := f.KubeClient()
			if err != nil {
				return nil, err
			}
			return ria.NewChangeStorageClassAction(l, kube.CoreV1().ConfigMaps(f.Namespace()), kube.StorageV1().StorageClasses()), nil
		},
		"velero.io/change-image-name": func(l logrus.FieldLogger) (any, error) {
			kube, err := f.KubeClient()
			if err != nil {
				return nil, err
			}
			return ria.NewChangeImageNameAction(l, kube.CoreV1().ConfigMaps(f.Namespace())), nil
		},
		"velero.io/pvc": func(l logrus.FieldLogger) (any, error) {
			kube, err := f.KubeClient()
			if err != nil {
				return nil, err
			}
			return ria.NewPVCAction(l, kube.CoreV1().ConfigMaps(f.Namespace()), kube.CoreV1().Nodes()), nil
		},
		"velero.io/secret": func(l logrus.FieldLogger) (any, error) {
			c, err := f.KubebuilderClient()
			if err != nil {
				return nil, err
			}
			return ria.NewSecretAction(l, c), nil
		},
	}
}

// backupActions are the built-in backup item actions Velero's server
// registers (as v1 BackupItemActions), built as plugin.go builds them: the
// PVC's volume (velero.io/pv), a pod's claims and PriorityClass
// (velero.io/pod), and a ServiceAccount's ClusterRoleBindings and
// ClusterRoles (velero.io/service-account: RBAC listers and Velero's
// discovery helper over the factory's clients).
func backupActions(f client.Factory) map[string]initializer {
	return map[string]initializer{
		"velero.io/pv":  func(l logrus.FieldLogger) (any, error) { return bia.NewPVCAction(l), nil },
		"velero.io/pod": func(l logrus.FieldLogger) (any, error) { return bia.NewPodAction(l), nil },
		"velero.io/service-account": func(l logrus.FieldLogger) (any, error) {
			kube, err := f.KubeClient()
			if err != nil {
				return nil, err
			}
			discovery, err := f.DiscoveryClient()
			if err != nil {
				return nil, err
			}
			helper, err := velerodiscovery.NewHelper(discovery, l)
			if err != nil {
				return nil, err
			}
			return bia.NewServiceAccountAction(l, actionhelpers.NewClusterRoleBindingListerMap(kube), helper)
		},
	}
}
