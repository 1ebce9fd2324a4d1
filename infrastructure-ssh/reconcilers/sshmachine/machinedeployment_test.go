package sshmachine_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/promread"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

func gzipB64(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// bootstrapData is the user data of a bootstrap provider this test plays, in the form CABPK's takes (jinja
// header, write_files with owner and permissions in every encoding, the /run/cluster-api placeholder, a
// runcmd that writes CAPI's sentinel only when its join step succeeds). Its join step checks the node
// configuration rendered for this host and records the join; no kubeadm is faked here: CABPK's own data
// runs with the real kubeadm in test/e2e TestSeparateClusters/KubeadmWorkersOnSSHHosts.
func bootstrapData(endpoint string) string {
	return fmt.Sprintf(`## template: jinja
#cloud-config

write_files:
-   path: /etc/kubernetes/pki/ca.crt
    owner: root:root
    permissions: '0640'
    content: |
      -----BEGIN CERTIFICATE-----
      MIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAVMRMwEQYDVQQDEwprdWJlcm5ldGVz
      -----END CERTIFICATE-----
-   path: /etc/kubernetes/extra/sysctl.conf
    owner: root:root
    permissions: '0600'
    encoding: gzip+b64
    content: %s
-   path: /etc/kubernetes/extra/banner
    encoding: b64
    content: %s
-   path: /etc/kubernetes/node.yaml
    owner: root:root
    permissions: '0640'
    content: |
      server: %s
      name: '{{ ds.meta_data.local_hostname }}'
-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)"
runcmd:
  - 'grep -qx "name: ''$(hostname)''" /etc/kubernetes/node.yaml && echo joined > /etc/kubernetes/kubelet.conf && echo success > /run/cluster-api/bootstrap-success.complete'
`, gzipB64("net.ipv4.ip_forward = 1\n"), base64.StdEncoding.EncodeToString([]byte("welcome\n")), endpoint)
}

// The user story: a MachineDeployment of YonderSSHMachines scales 0 → 3 → 1 → 3 with the real CAPI
// controllers. Each Machine claims its own host, runs cloud-init user data on it over SSH, gets
// providerID yonder-ssh://<namespace>/<host> and reaches Running once its Node exists; scaled-down hosts
// are cleaned and claimed again.
func TestMachineDeploymentScalesOverDistinctHosts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "md").Name
	hs, keyPEM := sshhosts.StartForTest(t, "md", 3)
	registerHosts(g, ns, hs, keyPEM, map[string]string{"pool": "edge"},
		[]string{"rm -rf /etc/kubernetes/*", "echo cleaned >> /var/lib/yonder-ssh/cleanups"})
	startProvider(t, testOptions())
	claimedBefore, releasedBefore := claimCounters()
	cluster := newCluster(t, g, ns, "edge")
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "edge-join", cluster.Name, bootstrapData(wl.Get(t).Endpoint))
	md := newMachineDeployment(g, ns, "workers", cluster, data.Name, "edge")

	harness.Scale(g, env, md, 3)
	machinesRunning(g, wlc, ns, 3)
	checkBootstrapDataRan(ctx, g, ns, hs)
	g.Expect(inventoryHosts(ns)).To(Equal(map[string]float64{"claimed": 3}))
	// Hosts report their claim, phase and facts.
	g.Eventually(func(g Gomega) {
		for _, h := range hostList(g, ns) {
			g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseProvisioned))
			g.Expect(h.Status.Facts).NotTo(BeNil())
			g.Expect(h.Status.Facts.Hostname).To(Equal(h.Name))
			g.Expect(h.Labels).To(HaveKey("clusterctl.cluster.x-k8s.io/move"))
			g.Expect(h.OwnerReferences).To(BeEmpty(), "inventory is never owned by a Cluster")
		}
	}).Should(Succeed())

	harness.Scale(g, env, md, 1)
	machinesRunning(g, wlc, ns, 1)
	checkReleasedHostsClean(ctx, g, ns, hs, 2)

	harness.Scale(g, env, md, 3)
	machinesRunning(g, wlc, ns, 3)
	for _, h := range hs {
		out, err := h.Output(ctx, "cat /run/cluster-api/bootstrap-success.complete")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(out)).To(Equal("success"))
	}

	harness.Scale(g, env, md, 0)
	g.Eventually(func(g Gomega) {
		g.Expect(sshMachines(g, ns)).To(BeEmpty())
		g.Expect(checkClaims(g, ns)).To(BeEmpty())
	}).Should(Succeed())

	// What an operator sees of it: 5 Machines (3, then 2 more after the scale to 1) each claimed, bootstrapped,
	// cleaned and released a host, as Normal Events on the machine and on the host (none a Warning; a
	// bootstrap under way is the condition's news, its end the Event's), and as the claim metrics.
	g.Eventually(func(g Gomega) {
		g.Expect(reasonsByObject(g, ns, "YonderSSHMachine")).To(And(HaveLen(5), HaveEach(ConsistOf(claim.HostClaimedEvent,
			infrav1.YonderSSHMachineBootstrapExecutedCondition,
			infrav1.YonderSSHMachineHostCleanedCondition, claim.HostReleasedEvent))))
		g.Expect(reasonsByObject(g, ns, "YonderSSHHost")).To(And(HaveLen(3), HaveEach(ConsistOf(claim.HostClaimedEvent, claim.HostReleasedEvent))))
	}).Should(Succeed())
	claimed, released := claimCounters()
	g.Expect(claimed - claimedBefore).To(BeNumerically("==", 5))
	g.Expect(released - releasedBefore).To(BeNumerically("==", 5))
	g.Expect(inventoryHosts(ns)).To(Equal(map[string]float64{"free": 3}))
}

// reasonsByObject returns the reasons of the Events recorded in ns on objects of kind, by object name
// (each reason once; a Warning's as "Warning <reason>", and a Normal Event's whose reason is a condition's
// False reason as "Normal <reason>").
func reasonsByObject(g Gomega, ns, kind string) map[string][]string {
	evs := &corev1.EventList{}
	g.Expect(env.List(context.Background(), evs, client.InNamespace(ns))).To(Succeed())
	out := map[string][]string{}
	for _, e := range evs.Items {
		r := e.Reason
		if e.Type == corev1.EventTypeWarning || strings.Contains(e.Message, " is False: ") {
			r = e.Type + " " + r
		}
		if e.InvolvedObject.Kind == kind && !slices.Contains(out[e.InvolvedObject.Name], r) {
			out[e.InvolvedObject.Name] = append(out[e.InvolvedObject.Name], r)
		}
	}
	return out
}

// claimCounters reads the claims and releases of YonderSSHMachines counted so far in this process.
func claimCounters() (claimed, released float64) {
	kind := map[string]string{"machine_kind": "YonderSSHMachine"}
	return promread.Sum(metrics.Registry, "yonder_claim_attempts_total", map[string]string{"machine_kind": "YonderSSHMachine", "outcome": "claimed"}),
		promread.Sum(metrics.Registry, "yonder_claim_releases_total", kind)
}

// inventoryHosts reads yonder_inventory_hosts of ns's YonderSSHHosts by state (states with no host left out).
func inventoryHosts(ns string) map[string]float64 {
	out := map[string]float64{}
	for _, state := range []string{"claimed", "free", "unavailable"} {
		if n := promread.Sum(metrics.Registry, "yonder_inventory_hosts", map[string]string{"host_kind": "YonderSSHHost", "namespace": ns, "state": state}); n > 0 {
			out[state] = n
		}
	}
	return out
}

// newMachineDeployment creates a YonderSSHMachineTemplate selecting hosts labelled pool=<pool> and a
// MachineDeployment of no replicas from it.
func newMachineDeployment(g *WithT, ns, name string, cluster *clusterv1.Cluster, data, pool string) *clusterv1.MachineDeployment {
	ctx := context.Background()
	tmpl := &infrav1.YonderSSHMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool},
		Spec: infrav1.YonderSSHMachineTemplateSpec{Template: infrav1.YonderSSHMachineTemplateResource{
			Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": pool}}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	return harness.MachineDeployment(g, env, harness.MachineDeploymentOptions{Namespace: ns, Name: name, Cluster: cluster.Name,
		Labels: map[string]string{"pool": pool}, DataSecret: data,
		Infrastructure: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachineTemplate", Name: tmpl.Name}})
}

// machinesRunning waits until ns holds want Running Machines, each on its own host with providerID
// yonder-ssh://<namespace>/<host>, bootstrapped, Ready and movable.
func machinesRunning(g *WithT, wlc client.Client, ns string, want int) {
	g.Eventually(func(g Gomega) {
		ensureNodes(g, wlc, ns)
		harness.ExpectMachinesRunning(g, env, ns, want)
		g.Expect(checkClaims(g, ns)).To(HaveLen(want))
		seenHosts := map[string]bool{}
		for _, m := range sshMachines(g, ns) {
			g.Expect(m.Spec.ProviderID).To(Equal("yonder-ssh://" + ns + "/" + m.Status.HostRef))
			g.Expect(seenHosts).NotTo(HaveKey(m.Status.HostRef))
			seenHosts[m.Status.HostRef] = true
			g.Expect(condition(&m, infrav1.YonderSSHMachineBootstrapExecutedCondition).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(condition(&m, clusterv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(m.Annotations).NotTo(HaveKey("clusterctl.cluster.x-k8s.io/block-move"))
		}
	}).Should(Succeed())
}

// checkBootstrapDataRan asserts that bootstrapData really ran on each host: files with their modes and
// encodings, the node configuration rendered for that host, the join step, the sentinel written, the
// providerID told to the host first, and the script (it holds the data) removed.
func checkBootstrapDataRan(ctx context.Context, g *WithT, ns string, hs []*sshhosts.Host) {
	for _, h := range hs {
		out, err := h.Output(ctx, "stat -c '%a %U' /etc/kubernetes/pki/ca.crt /etc/kubernetes/extra/sysctl.conf /etc/kubernetes/node.yaml && "+
			"cat /etc/kubernetes/extra/sysctl.conf /etc/kubernetes/extra/banner /etc/kubernetes/kubelet.conf /run/cluster-api/bootstrap-success.complete && "+
			"grep '^name:' /etc/kubernetes/node.yaml")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(Equal("640 root\n600 root\n640 root\nnet.ipv4.ip_forward = 1\nwelcome\njoined\nsuccess\nname: '" + h.Name + "'\n"))
		// The host was told its providerID before the bootstrap ran (yonder-agent reads it from there).
		out, err = h.Output(ctx, "cat /etc/yonder/provider-id")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(Equal("yonder-ssh://" + ns + "/" + h.Name + "\n"))
		out, _ = h.Output(ctx, "ls /var/lib/yonder-ssh/runs/*/")
		g.Expect(out).NotTo(ContainSubstring("bootstrap.sh"))
	}
}

// checkReleasedHostsClean asserts that want hosts are free, cleaned (the cleanup commands ran, no run
// record, sentinel or providerID left) and Available.
func checkReleasedHostsClean(ctx context.Context, g *WithT, ns string, hs []*sshhosts.Host, want int) {
	released := 0
	for _, h := range hostList(g, ns) {
		if h.Spec.ConsumerRef != nil {
			continue
		}
		released++
		for _, sh := range hs {
			if sh.Name != h.Name {
				continue
			}
			out, err := sh.Output(ctx, "cat /var/lib/yonder-ssh/cleanups; ls -A /etc/kubernetes /var/lib/yonder-ssh/runs; test ! -e /run/cluster-api/bootstrap-success.complete && echo no-sentinel; test ! -e /etc/yonder/provider-id && echo no-provider-id")
			g.Expect(err).NotTo(HaveOccurred(), out)
			g.Expect(out).To(Equal("cleaned\n/etc/kubernetes:\n\n/var/lib/yonder-ssh/runs:\nno-sentinel\nno-provider-id\n"))
		}
	}
	g.Expect(released).To(Equal(want))
	g.Eventually(func(g Gomega) {
		avail := 0
		for _, h := range hostList(g, ns) {
			if h.Status.Phase == infrav1.HostPhaseAvailable {
				avail++
			}
		}
		g.Expect(avail).To(Equal(want))
	}).Should(Succeed())
}
