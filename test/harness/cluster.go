package harness

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/test/builder"

	"github.com/yonder-dev/yonder/test/controlplane"
)

// clusterWait bounds the harness's own waits, whatever Eventually defaults a suite set: CAPI's
// controllers on a loaded machine take seconds to report a Cluster initialized.
const clusterWait = 2 * time.Minute

// ClusterOptions describe an attached Cluster.
type ClusterOptions struct {
	// Namespace and Name of the Cluster (and of its control plane object).
	Namespace, Name string
	// Labels of the Cluster (e.g. a watch filter).
	Labels map[string]string
	// Infrastructure, when set, is the Cluster's infrastructure object (created here; its name and
	// namespace are set to the Cluster's). Without it the Cluster has no infrastructure reference and sets
	// the workload endpoint itself.
	Infrastructure client.Object
	// ControlPlaneVersion, when set, is reported by the control plane (status.version), marked
	// externally managed as an attached control plane is.
	ControlPlaneVersion string
	// WaitForInfrastructure waits until CAPI reports the infrastructure provisioned too (a provider's
	// cluster reconciler must be running).
	WaitForInfrastructure bool
}

// AttachedCluster creates a Cluster whose control plane is the workload apiserver wl: CAPI's generic test
// control plane, marked initialized, stands in for the control plane provider (a Yonder provider under
// test supplies only workers), and "<cluster>-kubeconfig" is written as a control plane provider writes
// it. It waits until CAPI reports the control plane initialized.
func AttachedCluster(t testing.TB, g gomega.Gomega, c client.Client, wl *controlplane.ControlPlane, o ClusterOptions) *clusterv1.Cluster {
	t.Helper()
	ctx := context.Background()
	cp := genericControlPlane(o)
	g.Expect(c.Create(ctx, cp)).To(gomega.Succeed())
	_ = unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized")
	if o.ControlPlaneVersion != "" {
		_ = unstructured.SetNestedField(cp.Object, true, "status", "externalManagedControlPlane")
		_ = unstructured.SetNestedField(cp.Object, o.ControlPlaneVersion, "status", "version")
	}
	g.Expect(c.Status().Update(ctx, cp)).To(gomega.Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, Labels: o.Labels},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: builder.ControlPlaneGroupVersion.Group, Kind: builder.GenericControlPlaneKind, Name: o.Name},
		},
	}
	if infra := o.Infrastructure; infra != nil {
		infra.SetNamespace(o.Namespace)
		infra.SetName(o.Name)
		g.Expect(c.Create(ctx, infra)).To(gomega.Succeed())
		gvk, err := c.GroupVersionKindFor(infra)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		cluster.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: gvk.Group, Kind: gvk.Kind, Name: o.Name}
	} else {
		cluster.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: wl.Host.String(), Port: int32(wl.Port)} //nolint:gosec // a port
	}
	g.Expect(c.Create(ctx, cluster)).To(gomega.Succeed())
	g.Expect(wl.WriteKubeconfigSecret(ctx, c, cluster)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(gomega.Succeed())
		g.Expect(cluster.Status.Initialization.ControlPlaneInitialized).To(gomega.HaveValue(gomega.BeTrue()))
		if o.WaitForInfrastructure {
			g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(gomega.HaveValue(gomega.BeTrue()))
		}
	}, clusterWait, 100*time.Millisecond).Should(gomega.Succeed())
	return cluster
}

// Endpoint is the control plane endpoint of wl, for an infrastructure cluster's spec.
func Endpoint(wl *controlplane.ControlPlane) clusterv1.APIEndpoint {
	return clusterv1.APIEndpoint{Host: wl.Host.String(), Port: int32(wl.Port)} //nolint:gosec // a port
}

func genericControlPlane(o ClusterOptions) *unstructured.Unstructured {
	cp := &unstructured.Unstructured{}
	cp.SetAPIVersion(builder.ControlPlaneGroupVersion.String())
	cp.SetKind(builder.GenericControlPlaneKind)
	cp.SetNamespace(o.Namespace)
	cp.SetName(o.Name)
	_ = unstructured.SetNestedMap(cp.Object, map[string]any{}, "spec")
	return cp
}

// ExpectMachinesRunning asserts that namespace ns holds want Machines, all Running.
func ExpectMachinesRunning(g gomega.Gomega, c client.Client, ns string, want int) {
	list := &clusterv1.MachineList{}
	g.Expect(c.List(context.Background(), list, client.InNamespace(ns))).To(gomega.Succeed())
	g.Expect(list.Items).To(gomega.HaveLen(want))
	for _, m := range list.Items {
		g.Expect(m.Status.Phase).To(gomega.Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
	}
}

// Scale sets the replicas of MachineDeployment md.
func Scale(g gomega.Gomega, c client.Client, md *clusterv1.MachineDeployment, n int32) {
	g.Eventually(func() error {
		cur := &clusterv1.MachineDeployment{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(md), cur); err != nil {
			return err
		}
		cur.Spec.Replicas = &n
		return c.Update(context.Background(), cur)
	}, clusterWait, 100*time.Millisecond).Should(gomega.Succeed())
}

// MachineDeploymentOptions describe a MachineDeployment of workers.
type MachineDeploymentOptions struct {
	// Namespace and Name of the MachineDeployment; Cluster is the name of its Cluster.
	Namespace, Name, Cluster string
	// Replicas is the desired number of Machines.
	Replicas int32
	// Labels select the MachineDeployment's Machines and are set on them.
	Labels map[string]string
	// DataSecret names the bootstrap data Secret every Machine uses (no bootstrap provider runs).
	DataSecret string
	// Infrastructure is the infrastructure machine template.
	Infrastructure clusterv1.ContractVersionedObjectReference
}

// MachineDeployment creates the MachineDeployment o describes, its Machines at the workload's Kubernetes
// version (v1.36.3).
func MachineDeployment(g gomega.Gomega, c client.Client, o MachineDeploymentOptions) *clusterv1.MachineDeployment {
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: o.Cluster, Replicas: &o.Replicas,
			Selector: metav1.LabelSelector{MatchLabels: o.Labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: o.Labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: o.Cluster, Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: &o.DataSecret},
					InfrastructureRef: o.Infrastructure,
				},
			},
		},
	}
	g.Expect(c.Create(context.Background(), md)).To(gomega.Succeed())
	return md
}
