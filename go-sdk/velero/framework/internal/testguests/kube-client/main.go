// Test guest: a Velero backup item action that takes client-go's typed
// clientset and controller-runtime's client from Velero's client.Factory
// (iar's, clientfactory.New()), as Velero's built-ins take theirs, and
// records what each request got: the item comes back annotated
// iar.test/client = a JSON object of results. Not an example to follow.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"iar.dev/sdk/host"
	"iar.dev/sdk/velero/framework"
	_ "iar.dev/sdk/velero/framework/backupitemaction"
	"iar.dev/sdk/velero/framework/clientfactory"
)

func init() {
	framework.NewServer().
		RegisterBackupItemActionV2("iar.test/kube-client", newAction).
		Serve()
}

// newAction is the initializer. With the setting versionAtInit=true it
// asks the API server's version there, as Velero's ServiceAccount action
// builds its discovery helper in its initializer, and fails without one:
// the host runs initializers at the load's applies-to too.
func newAction(logrus.FieldLogger) (any, error) {
	if v, _ := host.Config("versionAtInit"); v == "true" {
		d, err := clientfactory.New().DiscoveryClient()
		if err != nil {
			return nil, err
		}
		if _, err := d.ServerVersion(); err != nil {
			return nil, fmt.Errorf("initializing: %w", err)
		}
	}
	return &action{}, nil
}

func main() {}

type action struct{}

func (*action) Name() string { return "iar.test/kube-client" }

func (*action) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"pods"}}, nil
}

// outcome is one request's answer: what it found, or its error and how
// apierrors reads it.
func outcome(found any, err error) any {
	if err == nil {
		return found
	}
	return map[string]any{
		"error":     err.Error(),
		"notFound":  apierrors.IsNotFound(err),
		"forbidden": apierrors.IsForbidden(err),
		"refused":   apierrors.IsMethodNotSupported(err),
		"bad":       apierrors.IsBadRequest(err),
	}
}

// writeOutcome is a write's answer: what it wrote, or its error and how
// apierrors reads it.
func writeOutcome(found any, err error) any {
	if err == nil {
		return found
	}
	return map[string]any{
		"error":       err.Error(),
		"conflict":    apierrors.IsConflict(err),
		"forbidden":   apierrors.IsForbidden(err),
		"invalid":     apierrors.IsInvalid(err),
		"unsupported": apierrors.IsUnsupportedMediaType(err),
	}
}

// writes changes a ConfigMap it creates in the item's namespace through
// client-go and controller-runtime, as Velero's plugins write: update at
// the version read, a stale update, RetryOnConflict, merge and JSON
// patches, a strategic merge patch, and a patch of an object it did not
// create.
func writes(ctx context.Context, cs kubernetes.Interface, crc crclient.Client, ns string) map[string]any {
	out := map[string]any{}
	cms := cs.CoreV1().ConfigMaps(ns)
	data := func(cm *corev1.ConfigMap) any { return cm.Data }
	created, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kc-state", Namespace: ns},
		Data:       map[string]string{"step": "1"},
	}, metav1.CreateOptions{})
	if err != nil {
		out["create"] = writeOutcome(nil, err)
		return out
	}
	next := created.DeepCopy()
	next.Data["step"] = "2"
	updated, err := cms.Update(ctx, next, metav1.UpdateOptions{})
	if err == nil {
		out["update"] = map[string]any{"data": updated.Data, "versionChanged": updated.ResourceVersion != created.ResourceVersion}
	} else {
		out["update"] = writeOutcome(nil, err)
	}
	stale := created.DeepCopy()
	stale.Data["step"] = "stale"
	_, err = cms.Update(ctx, stale, metav1.UpdateOptions{})
	out["stale"] = writeOutcome("written", err)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cms.Get(ctx, "kc-state", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Data["step"] = "3"
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	out["retried"] = writeOutcome("ok", err)
	merged, err := cms.Patch(ctx, "kc-state", types.MergePatchType, []byte(`{"data":{"merged":"yes"}}`), metav1.PatchOptions{})
	if err == nil {
		out["merge"] = data(merged)
	} else {
		out["merge"] = writeOutcome(nil, err)
	}
	patched, err := cms.Patch(ctx, "kc-state", types.JSONPatchType, []byte(`[{"op":"add","path":"/data/json","value":"yes"}]`), metav1.PatchOptions{})
	if err == nil {
		out["json"] = data(patched)
	} else {
		out["json"] = writeOutcome(nil, err)
	}
	_, err = cms.Patch(ctx, "kc-state", types.StrategicMergePatchType, []byte(`{"data":{"s":"x"}}`), metav1.PatchOptions{})
	out["strategic"] = writeOutcome("written", err)
	_, err = cms.Patch(ctx, "elsewhere", types.MergePatchType, []byte(`{"data":{"taken":"yes"}}`), metav1.PatchOptions{})
	out["foreign"] = writeOutcome("written", err)
	// A generated name, and a Secret read back without a read grant for
	// Secrets: the plugin's own (read-own).
	gen, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kc-gen-", Namespace: ns},
	}, metav1.CreateOptions{})
	if err == nil {
		out["generated"] = strings.HasPrefix(gen.Name, "kc-gen-") && len(gen.Name) == len("kc-gen-")+5
	} else {
		out["generated"] = writeOutcome(nil, err)
	}
	secrets := cs.CoreV1().Secrets(ns)
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "kc-token", Namespace: ns},
		Data:       map[string][]byte{"token": []byte("t")},
	}, metav1.CreateOptions{})
	if err == nil {
		var own *corev1.Secret
		own, err = secrets.Get(ctx, "kc-token", metav1.GetOptions{})
		if err == nil {
			out["readOwn"] = string(own.Data["token"])
		}
	}
	if err != nil {
		out["readOwn"] = writeOutcome(nil, err)
	}
	// controller-runtime's patch from a copy: a merge patch of the
	// difference.
	if crc != nil {
		var cm corev1.ConfigMap
		if err := crc.Get(ctx, crclient.ObjectKey{Namespace: ns, Name: "kc-state"}, &cm); err != nil {
			out["controller-runtime"] = writeOutcome(nil, err)
		} else {
			orig := cm.DeepCopy()
			cm.Data["runtime"] = "yes"
			err := crc.Patch(ctx, &cm, crclient.MergeFrom(orig))
			out["controller-runtime"] = writeOutcome(cm.Data, err)
		}
	}
	return out
}

func (*action) Execute(item runtime.Unstructured, _ *velerov1.Backup) (runtime.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	ctx := context.Background()
	f := clientfactory.New()
	cs, err := f.KubeClient()
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("client: %w", err)
	}
	ns := f.Namespace()
	// The item's namespace stands for the workload's.
	itemNS := (&unstructured.Unstructured{Object: item.UnstructuredContent()}).GetNamespace()
	seen := map[string]any{"namespace": ns}

	// Velero's ChangeStorageClassAction: its ConfigMap by label, in
	// Velero's namespace; then the StorageClass, cluster-scoped.
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{
		LabelSelector: "velero.io/plugin-config,velero.io/change-storage-class=RestoreItemAction",
	})
	var names []string
	class := ""
	if err == nil {
		for _, cm := range cms.Items {
			names = append(names, cm.Name+"="+cm.Data["standard"])
			class = cm.Data["standard"]
		}
	}
	seen["configmaps"] = outcome(names, err)
	// The class the ConfigMap maps "standard" to, as the action reads it.
	sc, err := cs.StorageV1().StorageClasses().Get(ctx, class, metav1.GetOptions{})
	if err == nil {
		seen["storageclass"] = sc.Provisioner
	} else {
		seen["storageclass"] = outcome(nil, err)
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, "missing", metav1.GetOptions{})
	seen["missing"] = outcome(nil, err)
	_, err = cs.CoreV1().Secrets(itemNS).Get(ctx, "db", metav1.GetOptions{})
	seen["secret"] = outcome(nil, err)
	_, err = cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	seen["watch"] = outcome(nil, err)
	err = cs.CoreV1().RESTClient().Get().Namespace(itemNS).Resource("pods").Name("web-0").SubResource("log").Do(ctx).Error()
	seen["log"] = outcome(nil, err)
	// Not this plugin's to write: no grant, and not its own.
	_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, &corev1ConfigMap, metav1.UpdateOptions{})
	seen["update"] = outcome(nil, err)
	groups, err := cs.Discovery().ServerGroups()
	if err == nil {
		var found []string
		for _, g := range groups.Groups {
			if g.Name == "storage.k8s.io" || g.Name == "apps" {
				found = append(found, g.Name+"="+g.PreferredVersion.Version)
			}
		}
		seen["groups"] = found
	} else {
		seen["groups"] = outcome(nil, err)
	}
	_, err = cs.Discovery().ServerVersion()
	seen["version"] = outcome("ok", err)

	// Velero's SecretAction's client: controller-runtime's with Velero's
	// scheme, its REST mapper found through discovery over the same
	// transport.
	crc, err := f.KubebuilderClient()
	if err != nil {
		seen["controller-runtime"] = outcome(nil, err)
	} else {
		var sas corev1.ServiceAccountList
		err = crc.List(ctx, &sas, crclient.InNamespace(itemNS))
		var found []string
		for _, sa := range sas.Items {
			found = append(found, sa.Name)
		}
		seen["controller-runtime"] = outcome(found, err)
	}

	if w, _ := host.Config("writes"); w == "true" {
		var c crclient.Client
		if crc, err := f.KubebuilderClient(); err == nil {
			c = crc
		}
		seen["writes"] = writes(ctx, cs, c, itemNS)
	}

	text, err := json.Marshal(seen)
	if err != nil {
		return nil, nil, "", nil, err
	}
	u := &unstructured.Unstructured{Object: item.UnstructuredContent()}
	u.SetAnnotations(map[string]string{"iar.test/client": string(text)})
	return u, nil, "", nil, nil
}

func (*action) Progress(string, *velerov1.Backup) (velero.OperationProgress, error) {
	return velero.OperationProgress{}, errors.New("this action starts no operations")
}

func (*action) Cancel(string, *velerov1.Backup) error { return nil }

// corev1ConfigMap is what the update of Velero's namespace asks to write
// (refused before it is read).
var corev1ConfigMap = func() corev1.ConfigMap {
	cm := corev1.ConfigMap{}
	cm.Name = "settings"
	return cm
}()
