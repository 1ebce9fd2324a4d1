package sshmachine_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshtest"
	"github.com/yonder-dev/yonder/test/labnet"
)

// The provider is stopped at chosen and random points while a MachineDeployment scales up and down
// (24 cycles): right after it claims a host, while a bootstrap runs, while a Machine is being deleted,
// or at once after starting. Stopping cancels its context, so in-flight SSH commands and API writes are
// cut off mid-way, as when the process dies. After every stop the inventory must hold no double claim
// and no claim of a machine that no longer exists; at the end every Machine is Running, each on its own
// host, and every other host is free and clean.
func TestControllerRestartsNeverDoubleClaimOrLeak(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "restart").Name
	n := labnet.NewForTest(t)
	keyPEM, _, err := sshtest.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := sshtest.Start(ctx, n, "rs", 5, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	registerHosts(g, ns, hs, keyPEM, map[string]string{"pool": "rs"}, []string{"rm -f /var/lib/yonder-ssh/joined"})
	bootstrapProvider := startProvider(t, testOptions())
	cluster := newCluster(t, g, ns, "rs")
	bootstrapProvider.stop()
	wlc, err := workload(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "rs-join", cluster.Name,
		"#cloud-config\nruncmd:\n- sleep 0.4\n- echo joined >> /var/lib/yonder-ssh/joined\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n")
	tmpl := &infrav1.YonderSSHMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rs"},
		Spec: infrav1.YonderSSHMachineTemplateSpec{Template: infrav1.YonderSSHMachineTemplateResource{
			Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": "rs"}}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	labels := map[string]string{"pool": "rs"}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rs"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster.Name, Replicas: ptr.To[int32](0),
			Selector: metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: cluster.Name, Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachineTemplate", Name: tmpl.Name},
				},
			},
		},
	}
	g.Expect(env.Create(ctx, md)).To(Succeed())
	scale := func(n int32) {
		g.Eventually(func() error {
			cur := &clusterv1.MachineDeployment{}
			if err := env.Get(ctx, client.ObjectKeyFromObject(md), cur); err != nil {
				return err
			}
			cur.Spec.Replicas = ptr.To(n)
			return env.Update(ctx, cur)
		}).Should(Succeed())
	}

	seed := time.Now().UnixNano()
	t.Logf("random seed %d", seed)
	rnd := rand.New(rand.NewPCG(uint64(seed), 0))
	replicas := []int32{3, 1, 4, 0, 2, 5, 1, 3}
	// Kill points: a state to reach before the stop (nil: stop at once).
	claimedNotProvisioned := func(g Gomega) bool {
		for _, m := range sshMachines(g, ns) {
			if m.Annotations[infrav1.HostAnnotation] != "" && !ptr.Deref(m.Status.Initialization.Provisioned, false) {
				return true
			}
		}
		return false
	}
	bootstrapRunning := func(g Gomega) bool {
		for _, m := range sshMachines(g, ns) {
			if m.Status.Bootstrap != nil && m.Status.Bootstrap.Phase == infrav1.BootstrapPhaseRunning {
				return true
			}
		}
		return false
	}
	deleting := func(g Gomega) bool {
		for _, m := range sshMachines(g, ns) {
			if !m.DeletionTimestamp.IsZero() && m.Annotations[infrav1.HostAnnotation] != "" {
				return true
			}
		}
		return false
	}
	points := []struct {
		name  string
		state func(Gomega) bool
	}{{"claimed", claimedNotProvisioned}, {"bootstrapping", bootstrapRunning}, {"deleting", deleting}, {"immediately", nil}}

	const cycles = 24
	prev := int32(0)
	for i := 0; i < cycles; i++ {
		want := replicas[i%len(replicas)]
		scale(want)
		p := startProvider(t, testOptions())
		// Scaling up can be stopped while claiming or bootstrapping, scaling down while deleting.
		choices := []int{0, 1, 3}
		if want < prev {
			choices = []int{2, 3}
		}
		prev = want
		kp := points[choices[rnd.IntN(len(choices))]]
		if kp.state != nil {
			// Wait (bounded) for the kill point; a cycle whose work finished before reaching it still
			// restarts the controller, just not at that point.
			_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				return kp.state(g), nil
			})
		}
		p.stop()
		t.Logf("cycle %d: replicas %d, stopped %s", i, replicas[i%len(replicas)], kp.name)
		checkClaims(g, ns, false)
	}

	startProvider(t, testOptions())
	scale(3)
	g.Eventually(func(g Gomega) {
		ensureNodes(g, wlc, ns)
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(3))
		for _, m := range list.Items {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
		}
		g.Expect(sshMachines(g, ns)).To(HaveLen(3))
		g.Expect(checkClaims(g, ns, false)).To(HaveLen(3))
	}, 3*time.Minute).Should(Succeed())
	claims := checkClaims(g, ns, false)
	claimed := map[string]string{}
	for uid, h := range claims {
		claimed[h] = uid
	}
	for _, h := range hs {
		out, err := h.Output(ctx, "ls /var/lib/yonder-ssh/runs 2>/dev/null; echo --; cat /var/lib/yonder-ssh/joined 2>/dev/null; true")
		g.Expect(err).NotTo(HaveOccurred())
		runs, joined, _ := strings.Cut(out, "--\n")
		if uid, ok := claimed[h.Name]; ok {
			// Exactly one run, of the machine that holds the host, and it ran once.
			g.Expect(strings.Fields(runs)).To(ConsistOf(uid), "host %s", h.Name)
			g.Expect(joined).To(Equal("joined\n"), "host %s ran its bootstrap once", h.Name)
		} else {
			g.Expect(strings.Fields(runs)).To(BeEmpty(), "free host %s is clean", h.Name)
			g.Expect(joined).To(BeEmpty(), "free host %s is clean", h.Name)
		}
	}
}
