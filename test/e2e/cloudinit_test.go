package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/osimage"
	"github.com/yonder-dev/yonder/test/stack"
)

// The cloud this test plays: an infrastructure provider of its own (one CRD, E2ECloudMachine, that honours
// CAPI's InfraMachine contract) whose "instances" are cloud-image hosts (test/hosts): the Debian cloud image
// test/osimage builds, booted with the Machine's bootstrap data as its NoCloud user data and the
// instance's providerID in its meta-data. That is what CAPA, CAPZ, CAPO and CAPV do with a Machine's
// bootstrap data: hand it, as it is, to the instance's own cloud-init.
var cloudMachineGVK = schema.GroupVersionKind{Group: "infrastructure.cloud.e2e.yonder.dev", Version: "v1beta1", Kind: "E2ECloudMachine"}

// Scenario 3 of docs/compatibility.md: YonderConfig's data, under real cloud-init. A Machine with a
// YonderConfig and an E2ECloudMachine, in a Cluster from the ssh flavor (YonderControlPlane attaching the
// workload cluster, no SSH workers): YonderConfig renders the data; the cloud boots an instance with it;
// the image's cloud-init installs yonder-agent (by digest, from the registry the manager names) and runs
// it, under systemd as PID 1; the Node joins with the instance's providerID, Ready, and runs a pod.
// Deleting the Machine deletes the Node, as with any cloud provider.
func TestYonderConfigUnderCloudInit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	t0 := time.Now()
	const name, machine = "cloud", "cloud-0"
	ns := st.HostNamespace
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	installCloudProvider(ctx, t)

	// The Cluster, with no SSH workers; the YonderConfig takes the flavor's worker configuration, as a
	// MachineDeployment's would.
	objs := generateCluster(ctx, t, name, "ssh", 0)
	var spec map[string]any
	for _, o := range objs {
		if o.GetKind() == "YonderConfigTemplate" {
			spec, _, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec")
		}
	}
	g.Expect(spec).NotTo(BeNil(), "the ssh flavor has a YonderConfigTemplate")
	apply(ctx, t, objs)
	t.Cleanup(func() { deleteCluster(context.Background(), t, name) })

	cfg := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	cfg.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("YonderConfig"))
	cfg.SetNamespace(ns)
	cfg.SetName(machine)
	infra := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	infra.SetGroupVersionKind(cloudMachineGVK)
	infra.SetNamespace(ns)
	infra.SetName(machine)
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: machine, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec: clusterv1.MachineSpec{ClusterName: name, Version: stack.KubernetesVersion,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "YonderConfig", Name: machine}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: cloudMachineGVK.Group, Kind: cloudMachineGVK.Kind, Name: machine}},
	}
	for _, o := range []client.Object{cfg, infra, m} {
		g.Expect(st.Client.Create(ctx, o)).To(Succeed(), "%T %s", o, o.GetName())
	}

	// The cloud waits for the bootstrap data, as CAPI's infrastructure providers do, and boots the instance.
	g.Eventually(func(g Gomega) {
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
		g.Expect(m.Spec.Bootstrap.DataSecretName).NotTo(BeNil(), "Machine %s has no bootstrap data yet: %v", machine, m.Status.Conditions)
	}, 3*time.Minute, time.Second).Should(Succeed())
	data := &corev1.Secret{}
	g.Expect(st.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: *m.Spec.Bootstrap.DataSecretName}, data)).To(Succeed())
	g.Expect(string(data.Data["format"])).To(Equal("cloud-config"))
	providerID := "e2e-cloud:///" + ns + "/" + machine
	h, err := hosts.StartCloudImage(ctx, st.Net, machine, img, hosts.CloudImageOptions{UserData: data.Data["value"], InstanceID: string(m.UID), ProviderID: providerID})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = h.Stop() })
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := h.RunInMachine(context.Background(), "cloud-init status --long; tail -n 60 /var/log/cloud-init-output.log; "+
				"systemctl list-units --no-pager --all 'yonder*'; journalctl --no-pager -n 80")
			t.Logf("instance %s:\n%s", machine, out)
		}
	})
	t.Logf("bootstrap data rendered and instance booted: %s after the start", time.Since(t0).Round(time.Second))

	// The instance is provisioned: the cloud reports its providerID and address (CAPI writes the object
	// too, its owner references and labels: each write retries on a conflict with the latest version).
	g.Eventually(func(g Gomega) {
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(infra), infra)).To(Succeed())
		g.Expect(unstructured.SetNestedField(infra.Object, providerID, "spec", "providerID")).To(Succeed())
		g.Expect(st.Client.Update(ctx, infra)).To(Succeed())
	}, 30*time.Second, time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(infra), infra)).To(Succeed())
		g.Expect(unstructured.SetNestedField(infra.Object, map[string]any{"provisioned": true}, "status", "initialization")).To(Succeed())
		g.Expect(unstructured.SetNestedSlice(infra.Object, []any{map[string]any{"type": "InternalIP", "address": h.Address.String()}}, "status", "addresses")).To(Succeed())
		g.Expect(st.Client.Status().Update(ctx, infra)).To(Succeed())
	}, 30*time.Second, time.Second).Should(Succeed())

	ms := waitWorkersIn(ctx, t, ns, name, 1, 8*time.Minute)
	g.Expect(ms[0].Spec.ProviderID).To(Equal(providerID))
	node := ms[0].Status.NodeRef.Name
	t.Logf("Node %s Ready with the instance's providerID: %s after the start", node, time.Since(t0).Round(time.Second))
	out, err := h.RunInMachine(ctx, "cloud-init status --long; cat /proc/1/comm")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(And(ContainSubstring("status: done"), ContainSubstring("DataSourceNoCloud"), HaveSuffix("systemd\n")))
	runPodOn(ctx, t, node)

	// Deleting the Machine deletes its Node (CAPI drains and deletes it); then the cloud deletes the instance.
	g.Expect(st.Client.Delete(ctx, m)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(apierrors.IsNotFound(st.Client.Get(ctx, client.ObjectKeyFromObject(m), m))).To(BeTrue(), "Machine %s still there", machine)
		err := st.WorkloadClient.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Node %s still there: %v", node, err)
	}, 3*time.Minute, time.Second).Should(Succeed())
	g.Expect(h.Stop()).To(Succeed())
	t.Logf("scenario YonderConfig under cloud-init took %s", time.Since(t0).Round(time.Second))
}

// installCloudProvider installs the test cloud's CRD with CAPI's contract label, and the aggregated role that
// gives CAPI's manager access to it, as an infrastructure provider's components do.
func installCloudProvider(ctx context.Context, t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	gvk := cloudMachineGVK
	plural := strings.ToLower(gvk.Kind) + "s"
	open := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + gvk.Group,
			Labels: map[string]string{clusterv1.GroupVersion.String(): gvk.Version}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: gvk.Kind, ListKind: gvk.Kind + "List", Plural: plural, Singular: strings.ToLower(gvk.Kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: gvk.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": *open, "status": *open}}}}},
		},
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-cloud-machines", Labels: map[string]string{"cluster.x-k8s.io/aggregate-to-manager": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{gvk.Group}, Resources: []string{plural, plural + "/status"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}
	// The management client's scheme has no apiextensions types: the CRD goes as unstructured.
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	g.Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: raw}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	for _, o := range []client.Object{u, role} {
		if err := st.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("failed to create %T %s: %v", o, o.GetName(), err)
		}
	}
	g.Eventually(func(g Gomega) {
		g.Expect(st.Client.Get(ctx, client.ObjectKeyFromObject(u), u)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			c, _ := c.(map[string]any)
			established = established || c["type"] == string(apiextensionsv1.Established) && c["status"] == string(apiextensionsv1.ConditionTrue)
		}
		g.Expect(established).To(BeTrue(), "CRD %s not established", crd.Name)
	}, time.Minute, time.Second).Should(Succeed())
}
