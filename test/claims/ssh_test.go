package claims_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/setup"
	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// sshProvider is the SSH provider on real sshd hosts.
type sshProvider struct{}

func (*sshProvider) name() string { return "ssh" }

func (*sshProvider) start(t *testing.T, o startOptions) *harness.Provider {
	t.Helper()
	so := setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}, ProbeInterval: 2 * time.Second,
		PollInterval: 300 * time.Millisecond, RetryInterval: 300 * time.Millisecond, CleanupRetries: 3}
	if o.slow {
		so.RetryInterval = 10 * time.Minute
	}
	return harness.StartProvider(t, env.Config, env.GetScheme(), func(ctx context.Context, mgr ctrl.Manager) error {
		if o.client != nil {
			so.Client = o.client(mgr.GetClient())
		}
		return setup.SetupReconcilers(ctx, mgr, so)
	})
}

func (*sshProvider) cluster(t *testing.T, g Gomega, ns, name string) *clusterv1.Cluster {
	t.Helper()
	return harness.AttachedCluster(t, g, env.Client, wl.Get(t), harness.ClusterOptions{Namespace: ns, Name: name, WaitForInfrastructure: true,
		Infrastructure: &infrav1.YonderSSHCluster{Spec: infrav1.YonderSSHClusterSpec{ControlPlaneEndpoint: harness.Endpoint(wl.Get(t))}}})
}

func (*sshProvider) machineTemplate(g Gomega, ns, name, pool string) clusterv1.ContractVersionedObjectReference {
	tmpl := &infrav1.YonderSSHMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderSSHMachineTemplateSpec{Template: infrav1.YonderSSHMachineTemplateResource{
			Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": pool}}}}}}
	g.Expect(env.Create(context.Background(), tmpl)).To(Succeed())
	return clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachineTemplate", Name: name}
}

func (*sshProvider) machine(g Gomega, ns, name, pool string) clusterv1.ContractVersionedObjectReference {
	m := &infrav1.YonderSSHMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderSSHMachineSpec{HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": pool}}}}
	g.Expect(env.Create(context.Background(), m)).To(Succeed())
	return clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: name}
}

// sshKeys are the annotations the provider's machines keep their claim in.
var sshKeys = claim.Keys{Host: infrav1.HostAnnotation, ReservedHost: infrav1.ReservedHostAnnotation, ClaimID: infrav1.ClaimIDAnnotation}

func (*sshProvider) machines(g Gomega, ns string) []machineView {
	l := &infrav1.YonderSSHMachineList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	out := make([]machineView, 0, len(l.Items))
	for _, m := range l.Items {
		out = append(out, viewOf(&m, sshKeys, m.Spec.ProviderID, m.Status.HostRef, m.Status.Initialization.Provisioned, m.Status.Conditions))
	}
	return out
}

func (*sshProvider) hosts(g Gomega, ns string) []hostView {
	l := &infrav1.YonderSSHHostList{}
	g.Expect(env.GetAPIReader().List(context.Background(), l, client.InNamespace(ns))).To(Succeed())
	out := make([]hostView, 0, len(l.Items))
	for _, h := range l.Items {
		v := hostView{Name: h.Name, Annotations: h.Annotations}
		if r := h.Spec.ConsumerRef; r != nil {
			v.ConsumerName, v.ConsumerID = r.Name, r.UID
		} else {
			g.Expect(h.Labels).NotTo(HaveKey(infrav1.ConsumerUIDLabel), "host %s has a consumer label without a claim", h.Name)
		}
		out = append(out, v)
	}
	return out
}

func (*sshProvider) newMachineObject() client.Object { return &infrav1.YonderSSHMachine{} }

func (p *sshProvider) recreate(g Gomega, ns, name string) {
	recreate(g, &infrav1.YonderSSHMachine{}, ns, name, func(old client.Object) client.Object {
		m := old.(*infrav1.YonderSSHMachine) //nolint:forcetypeassert // read as one
		return &infrav1.YonderSSHMachine{ObjectMeta: movedMeta(m.ObjectMeta), Spec: m.Spec}
	})
}

// step implements provider: the machine reconciler writes SSH hosts only to claim and to release them.
func (*sshProvider) step(obj client.Object) string {
	h, ok := obj.(*infrav1.YonderSSHHost)
	switch {
	case !ok:
		return ""
	case h.Spec.ConsumerRef != nil:
		return "claim"
	default:
		return "release"
	}
}

func (*sshProvider) steps() []string { return []string{"claim", "release"} }

// sshInventory is one test's sshd hosts on a lab network of its own.
type sshInventory struct {
	ns    string
	net   *labnet.Network
	key   []byte
	hosts map[string]*sshhosts.Host
	hold  bool
}

func (*sshProvider) newInventory(t *testing.T, ns string) inventory {
	t.Helper()
	key, _, err := sshhosts.NewClientKey()
	if err != nil {
		t.Fatalf("failed to create a client key: %v", err)
	}
	inv := &sshInventory{ns: ns, net: labnet.NewForTest(t), key: key, hosts: map[string]*sshhosts.Host{}}
	// The hosts go with the test: later tests' providers must not keep probing addresses that other
	// hosts reuse.
	t.Cleanup(func() { removeHosts(context.Background(), ns) })
	return inv
}

// removeHosts deletes the YonderSSHHosts of ns, without their finalizer (no provider runs any more).
func removeHosts(ctx context.Context, ns string) {
	l := &infrav1.YonderSSHHostList{}
	if err := env.GetAPIReader().List(ctx, l, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range l.Items {
		h := &l.Items[i]
		h.Finalizers = nil
		_ = env.Update(ctx, h)
		_ = env.Delete(ctx, h)
	}
}

// add starts n sshd hosts and registers them, with pinned host keys and a cleanup that removes what
// the bootstrap data recorded.
func (s *sshInventory) add(t *testing.T, g Gomega, prefix, pool string, n int) {
	t.Helper()
	ctx := context.Background()
	hs, err := sshhosts.Start(ctx, s.net, prefix, n, s.key)
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "ssh-" + prefix}, Data: map[string][]byte{"ssh-privatekey": s.key}}
	g.Expect(env.Create(ctx, secret)).To(Succeed())
	for _, h := range hs {
		s.hosts[h.Name] = h
		g.Expect(env.Create(ctx, &infrav1.YonderSSHHost{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: h.Name, Labels: map[string]string{"pool": pool}},
			Spec: infrav1.YonderSSHHostSpec{
				SSHEndpoint: infrav1.SSHEndpoint{Address: h.Address.String(), Port: int32(h.Port), User: "root",
					CredentialsSecretRef: infrav1.SecretReference{Name: secret.Name}, HostKey: sshhostsKey(h)},
				Cleanup: infrav1.CleanupSpec{Commands: []string{"rm -f /var/lib/yonder-ssh/joined"}},
			},
		})).To(Succeed())
	}
	_ = t
}

// provisionings reads each host's run records and how often its bootstrap ran.
func (s *sshInventory) provisionings(g Gomega) map[string]map[string]int {
	out := map[string]map[string]int{}
	for name, h := range s.hosts {
		runs, joined := s.state(g, h)
		out[name] = map[string]int{}
		for _, id := range runs {
			out[name][id] = joined
		}
	}
	return out
}

func (s *sshInventory) state(g Gomega, h *sshhosts.Host) (runs []string, joined int) {
	out, err := h.Output(context.Background(), "ls /var/lib/yonder-ssh/runs 2>/dev/null; echo --; cat /var/lib/yonder-ssh/joined 2>/dev/null; true")
	g.Expect(err).NotTo(HaveOccurred())
	r, j, _ := strings.Cut(out, "--\n")
	return strings.Fields(r), strings.Count(j, "joined")
}

// holdProvisioning keeps bootstraps running: the bootstrap data waits while the hold file exists.
func (s *sshInventory) holdProvisioning(hold bool) {
	s.hold = hold
	cmd := "rm -f " + holdFile
	if hold {
		cmd = "touch " + holdFile
	}
	for _, h := range s.hosts {
		_, _ = h.Output(context.Background(), cmd)
	}
}

func (s *sshInventory) checkFree(g Gomega, name string) {
	runs, joined := s.state(g, s.hosts[name])
	g.Expect(runs).To(BeEmpty(), "free host %s has no run record", name)
	g.Expect(joined).To(BeZero(), "free host %s is clean", name)
	h := &infrav1.YonderSSHHost{}
	g.Expect(env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, h)).To(Succeed())
	g.Expect(h.Annotations).NotTo(HaveKey(infrav1.NeedsCleanupAnnotation))
}

// releasedOrphan implements inventory: the host is marked for cleanup by an operator, naming the machine,
// and not claimable; the operator then cleans it (what the provider's cleanup removes) and removes the mark.
func (s *sshInventory) releasedOrphan(g Gomega, name, machine string) {
	ctx := context.Background()
	k := client.ObjectKey{Namespace: s.ns, Name: name}
	h := &infrav1.YonderSSHHost{}
	g.Expect(env.GetAPIReader().Get(ctx, k, h)).To(Succeed())
	g.Expect(h.Annotations).To(HaveKeyWithValue(infrav1.NeedsCleanupAnnotation, machine), "host %s released without its machine waits for an operator", name)
	_, err := s.hosts[name].Output(ctx, "rm -rf /var/lib/yonder-ssh/runs /var/lib/yonder-ssh/joined")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.GetAPIReader().Get(ctx, k, h); err != nil {
			return err
		}
		delete(h.Annotations, infrav1.NeedsCleanupAnnotation)
		return env.Update(ctx, h)
	})).To(Succeed())
}

// sshhostsKey is h's host key in authorized_keys format, as spec.hostKey pins it.
func sshhostsKey(h *sshhosts.Host) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(h.HostKey)))
}
