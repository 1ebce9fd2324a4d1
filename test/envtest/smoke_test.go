package envtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/cluster-api/util/test/builder"

	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	os.Exit(envtest.Run(m, envtest.Options{}, func(e *envtest.Environment) { env = e }))
}

// genericTemplate returns an object of one of CAPI's generic test template kinds.
func genericTemplate(gvk, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(builder.InfrastructureGroupVersion.String())
	if gvk == builder.GenericBootstrapConfigTemplateKind {
		u.SetAPIVersion(builder.BootstrapGroupVersion.String())
	}
	u.SetKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	_ = unstructured.SetNestedMap(u.Object, map[string]any{}, "spec", "template", "spec")
	return u
}

// The smoke story of the harness: real CAPI controllers, driven through the real apiserver, turn a
// MachineDeployment of 3 into 3 Machines with their bootstrap and infrastructure objects, and scaling
// it to 1 deletes 2 of them.
func TestMachineDeploymentScalesWithRealCAPIControllers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "smoke")

	infraCluster := &unstructured.Unstructured{}
	infraCluster.SetAPIVersion(builder.InfrastructureGroupVersion.String())
	infraCluster.SetKind(builder.GenericInfrastructureClusterKind)
	infraCluster.SetNamespace(ns.Name)
	infraCluster.SetName("smoke")
	_ = unstructured.SetNestedMap(infraCluster.Object, map[string]any{}, "spec")
	g.Expect(env.Create(ctx, infraCluster)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "smoke"},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureClusterKind, Name: infraCluster.GetName(),
		}},
	}
	g.Expect(env.Create(ctx, cluster)).To(Succeed())
	infraTmpl := genericTemplate(builder.GenericInfrastructureMachineTemplateKind, ns.Name, "infra")
	bootTmpl := genericTemplate(builder.GenericBootstrapConfigTemplateKind, ns.Name, "boot")
	g.Expect(env.Create(ctx, infraTmpl)).To(Succeed())
	g.Expect(env.Create(ctx, bootTmpl)).To(Succeed())

	labels := map[string]string{"smoke": "md"}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workers"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster.Name,
			Replicas:    ptr.To[int32](3),
			Selector:    metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: cluster.Name,
					Version:     "v1.36.3",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: builder.BootstrapGroupVersion.Group, Kind: builder.GenericBootstrapConfigTemplateKind, Name: bootTmpl.GetName(),
					}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureMachineTemplateKind, Name: infraTmpl.GetName(),
					},
				},
			},
		},
	}
	g.Expect(env.Create(ctx, md)).To(Succeed())

	machines := func() []clusterv1.Machine {
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(ns.Name), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
		return list.Items
	}
	g.Eventually(machines).Should(HaveLen(3))
	// Each Machine got its own infrastructure object, cloned from the template by the MachineSet controller.
	infraMachines := &unstructured.UnstructuredList{}
	infraMachines.SetAPIVersion(builder.InfrastructureGroupVersion.String())
	infraMachines.SetKind(builder.GenericInfrastructureMachineKind + "List")
	g.Eventually(func() int {
		g.Expect(env.List(ctx, infraMachines, client.InNamespace(ns.Name))).To(Succeed())
		return len(infraMachines.Items)
	}).Should(Equal(3))

	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To[int32](1)
	g.Expect(env.Patch(ctx, md, patch)).To(Succeed())
	g.Eventually(machines).Should(HaveLen(1))
	g.Eventually(func() int {
		g.Expect(env.List(ctx, infraMachines, client.InNamespace(ns.Name))).To(Succeed())
		return len(infraMachines.Items)
	}).Should(Equal(1))
}

// CAPI's admission webhooks run: an invalid object is rejected by the apiserver with CAPI's message.
func TestCAPIWebhooksRejectInvalidObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "webhooks")
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "bad"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "c",
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"a": "other"}},
				Spec: clusterv1.MachineSpec{
					ClusterName: "c",
					Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("data")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: builder.InfrastructureGroupVersion.Group, Kind: builder.GenericInfrastructureMachineTemplateKind, Name: "x",
					},
				},
			},
		},
	}
	err := env.Create(ctx, md)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(ContainSubstring(`spec.template.metadata.labels: Forbidden`), ContainSubstring(`must match spec.selector "a=b,cluster.x-k8s.io/cluster-name=c"`)))
}

// The workload cluster helper writes <cluster>-kubeconfig the way a control plane provider does: CAPI's
// kubeconfig reader finds it and it yields a working client for the Cluster.
func TestWorkloadKubeconfigSecretIsUsableByCAPI(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "kubeconfig")
	cp, err := controlplane.Start(ctx, controlplane.Options{Name: "wl"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cp.Stop() })

	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "wl", UID: "00000000-0000-0000-0000-000000000001"}}
	g.Expect(cp.WriteKubeconfigSecret(ctx, env.Client, cluster)).To(Succeed())
	secret := &corev1.Secret{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "wl-kubeconfig"}, secret)).To(Succeed())
	g.Expect(secret.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "wl"))
	g.Expect(secret.Data).To(HaveKey("value"))

	data, err := kubeconfig.FromSecret(ctx, env.Client, client.ObjectKeyFromObject(cluster))
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	g.Expect(err).NotTo(HaveOccurred())
	wl, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wl.Get(ctx, client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})).To(Succeed())
}
