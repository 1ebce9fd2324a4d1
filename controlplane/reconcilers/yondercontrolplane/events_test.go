package yondercontrolplane_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/controlplane/reconcilers/yondercontrolplane"
	"github.com/yonder-dev/yonder/test/harness"
)

// The operator's view of an attach, in `kubectl get events`: a rejected credential is a Warning with the
// condition's reason; once the user puts a working admin kubeconfig into the Secret, the kubeconfig is
// accepted, the cluster is available and initialized, its version observed, CAPI's kubeconfig Secret
// written and the join RBAC installed — each a Normal Event. No Event carries the credentials: neither
// the rejected token nor the client certificate or key that works.
func TestEventsTellTheAttachAndNeverACredential(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "events")
	badToken := "yonder-test-token-" + rand.String(24)
	cluster, cp := attach(ctx, g, ns.Name, "ev", tokenKubeconfig(g, workload.Endpoint, badToken), true)
	events := func(g Gomega) []string {
		evs, err := harness.Events(ctx, env.Client, cp)
		g.Expect(err).NotTo(HaveOccurred())
		return evs
	}
	g.Eventually(events).Should(ContainElement(HavePrefix("Warning " + controlplanev1.YonderControlPlaneKubeconfigUnauthorizedReason + ": " +
		controlplanev1.YonderControlPlaneKubeconfigValidCondition + " is False: The API server " + workload.Endpoint + " rejected the kubeconfig's credentials")))

	src := &corev1.Secret{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "ev-admin"}, src)).To(Succeed())
	src.Data["kubeconfig"] = workload.AdminKubeconfig
	g.Expect(env.Update(ctx, src)).To(Succeed())

	version := func(g Gomega) string { return getCP(ctx, g, cp).Status.Version }
	g.Eventually(version).Should(HavePrefix("v1.36."))
	v := version(g)
	g.Eventually(events).Should(ContainElements(
		"Normal "+controlplanev1.YonderControlPlaneKubeconfigValidCondition+": "+controlplanev1.YonderControlPlaneKubeconfigValidCondition+" is True again (was False)",
		"Normal "+clusterv1.AvailableCondition+": "+clusterv1.AvailableCondition+" is True ("+clusterv1.AvailableReason+")",
		"Normal "+yondercontrolplane.ControlPlaneInitializedEvent+": "+fmt.Sprintf("Attached control plane at %s:%d is initialized (Kubernetes %s)", workload.Host, workload.Port, v),
		"Normal "+yondercontrolplane.VersionObservedEvent+": The attached API server runs Kubernetes "+v,
		"Normal "+controlplanev1.YonderControlPlaneVersionUpToDateCondition+": "+controlplanev1.YonderControlPlaneVersionUpToDateCondition+" is True ("+controlplanev1.YonderControlPlaneVersionNotRequestedReason+")",
		"Normal "+yondercontrolplane.KubeconfigSecretCreatedEvent+": Created Secret "+ns.Name+"/"+cluster.Name+"-kubeconfig, the Cluster's kubeconfig",
		"Normal "+controlplanev1.YonderControlPlaneJoinRBACReadyCondition+": "+controlplanev1.YonderControlPlaneJoinRBACReadyCondition+" is True ("+controlplanev1.YonderControlPlaneJoinRBACInstalledReason+")",
	))

	admin, err := clientcmd.Load(workload.AdminKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	var credentials []string
	for _, u := range admin.AuthInfos {
		for _, b := range [][]byte{u.ClientCertificateData, u.ClientKeyData} {
			g.Expect(b).NotTo(BeEmpty())
			credentials = append(credentials, base64.StdEncoding.EncodeToString(b)[:32], pemBody(b))
		}
	}
	all := events(g)
	g.Expect(all).To(HaveEach(Not(ContainSubstring(badToken))))
	g.Expect(all).To(HaveEach(Not(ContainSubstring("-----BEGIN"))))
	for _, c := range credentials {
		g.Expect(all).To(HaveEach(Not(ContainSubstring(c))))
	}
}

// pemBody is the first line of base64 inside a PEM block: what a leaked certificate or key would show.
func pemBody(b []byte) string {
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 {
		return string(b)
	}
	return lines[1]
}
