package baremetalhost_test

import (
	"context"
	"crypto/x509"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// events are the Events recorded on the ConfigMap with reason.
func events(g Gomega, cm types.NamespacedName, reason string) []corev1.Event {
	var list corev1.EventList
	g.Expect(env.GetAPIReader().List(context.Background(), &list, client.InNamespace(cm.Namespace))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "ConfigMap" && e.InvolvedObject.Name == cm.Name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// Issue 17: the EK vendor roots come from a ConfigMap that the manager watches. Before it exists, hosts
// say that no root is loaded (EKCertificatesVerified=False, VendorRootsNotLoaded, naming the ConfigMap);
// once it holds the vendor's root and intermediate they are in the service's pool — no restart — and the
// hosts say so. A broken edit keeps the last good certificates, names the key in a Warning Event and in
// the hosts' condition, and never quotes the PEM; deleting the ConfigMap withdraws its roots, and roots
// from --ek-roots files stay in the union throughout.
func TestEKRootsConfigMapIsAppliedWithoutRestart(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-ekroots").Name
	key := types.NamespacedName{Namespace: ns, Name: "ek-roots"}
	rootFile, intermediateFile, err := swtpm.LocalCA(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	rootPEM, err := os.ReadFile(rootFile)
	g.Expect(err).NotTo(HaveOccurred())
	intermediatePEM, err := os.ReadFile(intermediateFile)
	g.Expect(err).NotTo(HaveOccurred())

	sim := startSim(t, nil)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:e7:00:01"))
	trust := attest.NewEKTrust()
	r := testReconciler(inventory.NewStatic())
	harness.StartProvider(t, env.Config, env.GetScheme(), func(ctx context.Context, mgr ctrl.Manager) error {
		opts := manager.Controllers{SkipNameValidation: true}.Options(controllerConcurrency)
		w, err := baremetalhost.WatchEKRoots(mgr, key, trust, opts)
		if err != nil {
			return err
		}
		r.Client, r.Namespaces, r.EKRoots = mgr.GetClient(), []string{ns}, w
		return r.SetupWithManager(ctx, mgr, opts)
	})
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:e7:00:01", bmcPass)
	t.Cleanup(func() { deleteHost(t, h) })
	ekTrust := condition(h, baremetalhost.BareMetalHostEKTrustCondition)

	g.Eventually(ekTrust).Should(And(HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", baremetalhost.BareMetalHostEKRootsNotLoadedReason),
		HaveField("Message", ContainSubstring("ConfigMap "+key.String()+" does not exist"))))
	g.Expect(trust.RootCount()).To(BeZero())

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Data: map[string]string{
		"swtpm-localca.pem": string(rootPEM), "intermediate-swtpm.crt": string(intermediatePEM), "README": "vendor roots of the site",
	}}
	g.Expect(env.Create(ctx, cm)).To(Succeed())
	g.Eventually(trust.RootCount).Should(Equal(1), "the root is in use without a restart")
	_, intermediates := trust.Pools()
	g.Expect(intermediates.Equal(mustPool(g, intermediatePEM))).To(BeTrue(), "the intermediate- key is an intermediate, not a root")
	g.Eventually(ekTrust).Should(And(HaveField("Status", metav1.ConditionTrue),
		HaveField("Reason", baremetalhost.BareMetalHostEKRootsConfiguredReason), HaveField("Message", ContainSubstring("1 loaded"))))
	g.Eventually(func(g Gomega) []corev1.Event { return events(g, key, baremetalhost.EKRootsLoadedReason) }).Should(HaveLen(1))

	// A truncated paste into a second key: nothing of the edit applies, the host and an Event say why.
	lines := strings.Split(strings.TrimSpace(string(rootPEM)), "\n")
	broken := strings.Join(append(lines[:3:3], lines[len(lines)-1]), "\n")
	patchConfigMap(g, key, func(cm *corev1.ConfigMap) { cm.Data["vendor-b.pem"] = broken; delete(cm.Data, "swtpm-localca.pem") })
	g.Eventually(func(g Gomega) []corev1.Event { return events(g, key, baremetalhost.EKRootsInvalidReason) }).Should(
		ContainElement(And(HaveField("Type", corev1.EventTypeWarning), HaveField("Message", ContainSubstring(`key "vendor-b.pem"`)),
			HaveField("Message", ContainSubstring("previous EK certificates stay in use")))))
	g.Eventually(ekTrust).Should(And(HaveField("Status", metav1.ConditionTrue),
		HaveField("Message", ContainSubstring(`the latest version of ConfigMap `+key.String()+` was not applied: key "vendor-b.pem"`))))
	g.Expect(trust.RootCount()).To(Equal(1), "the last good root stays, although the edit also removed it")
	for _, e := range events(g, key, baremetalhost.EKRootsInvalidReason) {
		g.Expect(e.Message).NotTo(ContainSubstring(lines[1]), "no certificate material in Events")
	}
	g.Expect(getHost(g, h).Status.Conditions).NotTo(ContainElement(HaveField("Message", ContainSubstring(lines[1]))))

	// Fixed: the edit applies (the vendor root was removed in it, so no root is left).
	patchConfigMap(g, key, func(cm *corev1.ConfigMap) { delete(cm.Data, "vendor-b.pem") })
	g.Eventually(trust.RootCount).Should(BeZero())
	g.Eventually(ekTrust).Should(And(HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", baremetalhost.BareMetalHostEKRootsNotLoadedReason), HaveField("Message", ContainSubstring("holds no root certificate"))))

	// Roots from files are another source: they stay whatever the ConfigMap does.
	fileRoots, err := attest.ParseCertificates(rootPEM)
	g.Expect(err).NotTo(HaveOccurred())
	trust.Set("--ek-roots", attest.EKCerts{Roots: fileRoots})
	patchConfigMap(g, key, func(cm *corev1.ConfigMap) { cm.Data["swtpm-localca.pem"] = string(rootPEM) })
	g.Eventually(trust.RootCount).Should(Equal(2))
	g.Expect(env.Delete(ctx, cm)).To(Succeed())
	g.Eventually(trust.RootCount).Should(Equal(1), "the deleted ConfigMap's root is withdrawn, the file's stays")
	g.Expect(trust.Sources()).To(Equal([]string{"--ek-roots"}))
	g.Eventually(ekTrust).Should(And(HaveField("Status", metav1.ConditionTrue),
		HaveField("Message", ContainSubstring("ConfigMap "+key.String()+" does not exist"))))
	g.Expect(getHost(g, h).Status.Provisioning.State).NotTo(Equal(metal3v1.StateProvisioning))
}

func mustPool(g Gomega, pemData []byte) *x509.CertPool {
	p := x509.NewCertPool()
	g.Expect(p.AppendCertsFromPEM(pemData)).To(BeTrue())
	return p
}

// patchConfigMap edits the ConfigMap as an operator would, retrying on conflicts.
func patchConfigMap(g Gomega, key types.NamespacedName, mutate func(*corev1.ConfigMap)) {
	g.Eventually(func() error {
		cm := &corev1.ConfigMap{}
		if err := env.GetAPIReader().Get(context.Background(), key, cm); err != nil {
			return err
		}
		mutate(cm)
		return env.Update(context.Background(), cm)
	}).Should(Succeed())
}

// addWithoutEKCertificate gives host id a TPM whose EK has no certificate (some platforms ship them).
func (p *pxeHosts) addWithoutEKCertificate(id, mac string) {
	p.addTPM(id, mac, swtpm.StartWithoutEKCertificate)
}

// Issue 17: a TPM without an EK certificate whose EK the operator registered on the BareMetalHost
// (annotation metal.yonder.dev/tpm-ek-sha256) provisions although the boot server verifies EK
// certificates against vendor roots: the registration is the trust, and the host's Attested condition
// says so. The same kind of TPM on a host that only has an enrolment window is refused
// (EKCertificateMissing, from the host's own DHCP lease a real failure: not pinned, powered off).
func TestRegisteredEKWithoutCertificateProvisions(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-regek").Name
	lab := startLeasingBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	macs := map[string]string{"registered": "52:54:00:e8:00:01", "window": "52:54:00:e8:00:02"}
	for id, mac := range macs {
		hosts.addWithoutEKCertificate(id, mac)
	}
	sim := startSim(t, hosts)
	for id, mac := range macs {
		sim.AddSystem(redfishsim.DefaultSystem(id, mac))
	}
	r := testReconciler(lab.inv)
	startController(t, r, ns)

	registered := newHost(g, ns, "registered", sim, "registered", macs["registered"], bmcPass, noWindow, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.EKFingerprintAnnotation] = ekFingerprint(t, hosts.tpms["registered"])
	})
	window := newHost(g, ns, "window", sim, "window", macs["window"], bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.BootAddressAnnotation] = "127.0.0.1" // where its PXE boot asks from
	})
	t.Cleanup(func() { deleteHost(t, registered); deleteHost(t, window) })
	for _, h := range []*metal3v1.BareMetalHost{registered, window} {
		g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
		claim(g, ns, h, "data-of-"+h.Name)
	}

	g.Eventually(state(registered)).Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(func() []string { _, d, _ := hosts.snapshot("registered"); return d }).Should(Equal([]string{"data-of-registered"}))
	g.Expect(getHost(g, registered).Annotations).To(HaveKey(baremetalhost.EnrolmentAnnotation))
	g.Expect(condition(registered, baremetalhost.BareMetalHostAttestedCondition)(g)).To(And(HaveField("Status", metav1.ConditionTrue),
		HaveField("Message", ContainSubstring("EK registered out of band"))))

	g.Eventually(condition(window, baremetalhost.BareMetalHostAttestedCondition)).Should(HaveField("Reason", wire.ReasonEKCertificateMissing))
	g.Eventually(func() bool { return sim.State("window").PoweredOn }).Should(BeFalse())
	g.Expect(getHost(g, window).Annotations).NotTo(HaveKey(baremetalhost.EnrolmentAnnotation))
	_, data, _ := hosts.snapshot("window")
	g.Expect(data).To(BeEmpty())
}
