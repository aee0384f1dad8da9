// Package clientfactory is Velero's client.Factory
// (github.com/vmware-tanzu/velero/pkg/client) inside the sandbox: every
// client it makes talks to the host through iar.dev/sdk/velero/framework/kube,
// under the plugin's grants, and Namespace() is the namespace of the
// call's Backup or Restore.
//
// A plugin whose initializers take Velero's client.Factory (Velero's own
// built-ins, its CSI actions) takes this one unchanged; only the main that
// built Velero's factory changes:
//
//	f := clientfactory.New() // was: client.NewFactory("velero", config)
//	framework.NewServer().
//		RegisterRestoreItemAction("velero.io/change-storage-class", newChangeStorageClassRestoreItemAction(f)).
//		Serve()
//
// What a component cannot have is refused when used, never faked: there
// are no flags to bind (BindFlags binds none), QPS and burst are the
// host's (maxHostCalls), and a watch client's watches are refused by the
// host's rule no-watch.
package clientfactory

import (
	volumegroupsnapshotv1beta2 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1beta2"
	snapshotv1api "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/spf13/pflag"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	k8scheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kbclient "sigs.k8s.io/controller-runtime/pkg/client"

	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	velerov2alpha1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v2alpha1"
	"github.com/vmware-tanzu/velero/pkg/client"

	"iar.dev/sdk/velero/framework/kube"
)

type factory struct{}

// New is a client.Factory over the host.
func New() client.Factory { return factory{} }

// BindFlags binds nothing: a component has no command line.
func (factory) BindFlags(*pflag.FlagSet) {}

// ClientConfig is kube.Config(): requests go to the host.
func (factory) ClientConfig() (*rest.Config, error) { return kube.Config(), nil }

func (f factory) KubeClient() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(kube.Config())
}

func (f factory) DynamicClient() (dynamic.Interface, error) {
	return dynamic.NewForConfig(kube.Config())
}

// scheme is the one Velero's factory gives its controller-runtime clients:
// Kubernetes' types, Velero's, CRDs and CSI snapshots.
func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		velerov1api.AddToScheme,
		velerov2alpha1api.AddToScheme,
		k8scheme.AddToScheme,
		apiextv1beta1.AddToScheme,
		apiextv1.AddToScheme,
		snapshotv1api.AddToScheme,
		volumegroupsnapshotv1beta2.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (f factory) KubebuilderClient() (kbclient.Client, error) {
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	return kbclient.New(kube.Config(), kbclient.Options{Scheme: s})
}

// KubebuilderWatchClient's Watch calls are refused by the host (rule
// no-watch); its reads and writes work as KubebuilderClient's.
func (f factory) KubebuilderWatchClient() (kbclient.WithWatch, error) {
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	return kbclient.NewWithWatch(kube.Config(), kbclient.Options{Scheme: s})
}

func (f factory) DiscoveryClient() (discovery.AggregatedDiscoveryInterface, error) {
	return discovery.NewDiscoveryClientForConfig(kube.Config())
}

// SetBasename only names the user agent, which the host does not read.
func (factory) SetBasename(string) {}

// SetClientQPS and SetClientBurst change nothing: the host bounds a
// plugin's calls (maxHostCalls), not a client-side limiter.
func (factory) SetClientQPS(float32) {}
func (factory) SetClientBurst(int)   {}

// Namespace is the namespace of the call's Backup or Restore (Velero's
// server namespace).
func (factory) Namespace() string { return kube.Namespace() }
