package metal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/test/prometheus"
	"github.com/yonder-dev/yonder/test/stack"
)

// metalCounters are the metal manager's and the claim's series that one provisioning moves, each as a
// PromQL sum over the stack's Prometheus (st.Prometheus scrapes the managers as the shipped
// metrics-reader role allows; docs/README.md). Sums, so a counter no target exported yet reads 0.
// TFTP is not among them: the test VM's firmware carries iPXE, which the DHCP server sends straight to
// the HTTP script, so this boot makes no TFTP transfer (TFTP's counters are tested in internal/netboot).
var metalCounters = []string{
	`sum(yonder_claim_attempts_total{job="yonder-providers",machine_kind="YonderMetalMachine",outcome="claimed"})`,
	`sum(yonder_metal_phase_seconds_count{job="yonder-providers",state="provisioning"})`,
	`sum(yonder_metal_dhcp_requests_total{job="yonder-providers"})`,
	`sum(yonder_metal_http_requests_total{job="yonder-providers"})`,
	`sum(yonder_metal_attestation_results_total{job="yonder-providers",reason="BootstrapDataReleased"})`,
}

// claimedBareMetalHosts is the inventory gauge of claimed BareMetalHosts (the claim's collector counts the
// metal manager's cache at every scrape).
const claimedBareMetalHosts = `sum(yonder_inventory_hosts{job="yonder-providers",host_kind="BareMetalHost",state="claimed"})`

// metalMetrics follows TestMetalClusterctlLifecycle through Prometheus: what it scraped before the
// Cluster, and the secrets the scenario handled, which no series may carry.
type metalMetrics struct {
	ctx      context.Context
	baseline map[string]float64
	secrets  map[string]string
}

// expectEveryTargetUp waits until Prometheus scrapes every manager the stack runs — ours in the
// yonder-providers job, CAPI's in cluster-api — with up == 1, and records the counters' values before
// the Cluster exists.
func expectEveryTargetUp(t *testing.T) *metalMetrics {
	t.Helper()
	g := NewWithT(t)
	g.Expect(st.Prometheus).NotTo(BeNil(), "the stack runs Prometheus (Options.Prometheus)")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := st.Managers()
	g.Expect(want).To(ContainElements("cluster-api", "bootstrap-yonder", "control-plane-yonder", "infrastructure-yonder-ssh", "infrastructure-yonder-metal"))
	up, err := st.Prometheus.WaitFor(ctx, fmt.Sprintf(`up{job=~"%s|%s"}`, stack.ProvidersJob, stack.CAPIJob), func(v prometheus.Vector) bool {
		return len(v) == len(want) && prometheus.All(prometheus.Equals(1))(v)
	})
	g.Expect(err).NotTo(HaveOccurred(), targetsDiag(ctx))
	var providers []string
	for _, s := range up {
		providers = append(providers, s.Labels["provider"])
	}
	g.Expect(providers).To(ConsistOf(want), "one target per manager, labelled with its provider")
	m := &metalMetrics{ctx: context.Background(), baseline: map[string]float64{}, secrets: map[string]string{}}
	for _, q := range metalCounters {
		m.baseline[q] = m.sum(g, q)
	}
	g.Expect(m.sum(g, claimedBareMetalHosts)).To(BeZero(), "no host is claimed before the Cluster")
	return m
}

// targetsDiag lists the targets' health and last scrape errors, for a failed wait.
func targetsDiag(ctx context.Context) func() string {
	return func() string {
		ts, err := st.Prometheus.Targets(context.WithoutCancel(ctx))
		var b strings.Builder
		fmt.Fprintf(&b, "targets (error %v):\n", err)
		for _, t := range ts {
			fmt.Fprintf(&b, "  %s %s %s %s\n", t.Job, t.ScrapeURL, t.Health, t.LastError)
		}
		return b.String()
	}
}

func (m *metalMetrics) sum(g Gomega, q string) float64 {
	v, err := st.Prometheus.Query(m.ctx, q)
	g.Expect(err).NotTo(HaveOccurred())
	return v.Sum()
}

// expectProvisioningCounted: after the host was claimed, PXE-booted, attested and given its data, every
// counter of metalCounters rose above its value before the Cluster and the inventory counts the host as
// claimed. It must run before the metal manager is restarted (its counters start at 0 again).
func (m *metalMetrics) expectProvisioningCounted(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	for _, q := range metalCounters {
		g.Eventually(func(g Gomega) float64 { return m.sum(g, q) }, 30*time.Second, time.Second).
			Should(BeNumerically(">", m.baseline[q]), "%s moved from %v", q, m.baseline[q])
	}
	g.Eventually(func(g Gomega) float64 { return m.sum(g, claimedBareMetalHosts) }, 30*time.Second, time.Second).Should(Equal(1.0))
}

// expectReleaseCounted: after scaling to 0, the inventory counts no claimed host and the release was counted.
func (m *metalMetrics) expectReleaseCounted(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) float64 { return m.sum(g, claimedBareMetalHosts) }, 30*time.Second, time.Second).Should(BeZero())
	g.Eventually(func(g Gomega) float64 {
		return m.sum(g, `sum(yonder_claim_releases_total{job="yonder-providers",machine_kind="YonderMetalMachine"})`)
	}, 30*time.Second, time.Second).Should(BeNumerically(">", 0))
}

// collectSecrets records the secrets the scenario handled while they exist: the BMC password, the
// Machine's bootstrap token (the workload cluster's bootstrap token Secrets), the hosts' SSH private
// key, the credentials of every kubeconfig Secret and Prometheus's own bearer token.
func (m *metalMetrics) collectSecrets(t *testing.T, host *stack.MetalHost) {
	t.Helper()
	g := NewWithT(t)
	bmc := &corev1.Secret{}
	g.Expect(st.Client.Get(m.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: host.BMCSecret}, bmc)).To(Succeed())
	m.secrets["BMC password"] = string(bmc.Data["password"])
	tokens := &corev1.SecretList{}
	// The bootstrap provider issues the token when the Machine is created, before its host boots.
	g.Eventually(func(g Gomega) []corev1.Secret {
		g.Expect(st.WorkloadClient.List(m.ctx, tokens, client.InNamespace(metav1.NamespaceSystem), client.MatchingFields{"type": string(bootstrapapi.SecretTypeBootstrapToken)})).To(Succeed())
		return tokens.Items
	}, 2*time.Minute, time.Second).ShouldNot(BeEmpty(), "the Machine's bootstrap token exists until its Node joined")
	for _, s := range tokens.Items {
		m.secrets["bootstrap token "+s.Name] = string(s.Data[bootstrapapi.BootstrapTokenIDKey]) + "." + string(s.Data[bootstrapapi.BootstrapTokenSecretKey])
		m.secrets["bootstrap token secret "+s.Name] = string(s.Data[bootstrapapi.BootstrapTokenSecretKey])
	}
	m.addPEM("SSH private key", st.ClientKeyPEM)
	secs := &corev1.SecretList{}
	g.Expect(st.Client.List(m.ctx, secs, client.InNamespace(st.HostNamespace))).To(Succeed())
	kubeconfigs := 0
	for _, s := range secs.Items {
		if s.Name != stack.WorkloadKubeconfigSecret && !strings.HasSuffix(s.Name, "-kubeconfig") {
			continue
		}
		cfg, err := clientcmd.Load(s.Data["value"])
		g.Expect(err).NotTo(HaveOccurred(), "kubeconfig Secret %s", s.Name)
		for user, a := range cfg.AuthInfos {
			if a.Token != "" {
				m.secrets[fmt.Sprintf("kubeconfig %s user %s token", s.Name, user)] = a.Token
			}
			m.addPEM(fmt.Sprintf("kubeconfig %s user %s client key", s.Name, user), a.ClientKeyData)
			kubeconfigs++
		}
	}
	g.Expect(kubeconfigs).To(BeNumerically(">=", 2), "the workload admin kubeconfig and the Cluster's own")
	m.secrets["Prometheus bearer token"] = st.ScrapeToken()
}

// addPEM records the base64 lines of a PEM block's body: any of them in a label would leak the key.
func (m *metalMetrics) addPEM(name string, pemData []byte) {
	for i, l := range strings.Split(string(pemData), "\n") {
		if len(l) >= 16 && !strings.HasPrefix(l, "-----") {
			m.secrets[fmt.Sprintf("%s line %d", name, i)] = l
		}
	}
}

// expectNoSecretInLabels scans the label values of every series Prometheus holds from this run — every
// manager's, CAPI's and its own — for the collected secrets.
func (m *metalMetrics) expectNoSecretInLabels(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(m.secrets).To(HaveKey("BMC password"))
	series, err := st.Prometheus.Series(m.ctx, `{__name__=~".+"}`)
	g.Expect(err).NotTo(HaveOccurred())
	names := map[string]bool{}
	var leaks []string
	for _, s := range series {
		names[s["__name__"]] = true
		for k, v := range s {
			for what, secret := range m.secrets {
				if secret != "" && strings.Contains(v, secret) {
					leaks = append(leaks, fmt.Sprintf("%s in label %s of %s", what, k, s["__name__"]))
				}
			}
		}
	}
	g.Expect(names).To(HaveKey("yonder_metal_attestation_results_total"), "the scan covers the metal manager's series")
	g.Expect(names).To(HaveKey("yonder_claim_attempts_total"))
	g.Expect(leaks).To(BeEmpty())
	t.Logf("scanned %d series (%d metric names) for %d secret values: none in a label", len(series), len(names), len(m.secrets))
}
