package claim

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// configMapPool is an inventory of ConfigMaps for unit tests: the consumer lives in annotations, the
// failure domain in a label, "down" demotes.
type configMapPool struct{}

func (configMapPool) HostKind() string           { return "ConfigMap" }
func (configMapPool) NewHost() *corev1.ConfigMap { return &corev1.ConfigMap{} }

func (configMapPool) ConsumerOf(h *corev1.ConfigMap) *Consumer {
	if h.Annotations["id"] == "" {
		return nil
	}
	return &Consumer{Name: h.Annotations["name"], ID: types.UID(h.Annotations["id"]), Cluster: h.Annotations["cluster"]}
}

func (configMapPool) SetConsumer(h *corev1.ConfigMap, c Consumer) {
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations["name"], h.Annotations["id"], h.Annotations["cluster"] = c.Name, string(c.ID), c.Cluster
	if c.ID == "" {
		h.Annotations["id"] = "recent"
	}
}

func (configMapPool) ClearConsumer(h *corev1.ConfigMap)        { h.Annotations = nil }
func (p configMapPool) Available(h *corev1.ConfigMap) bool     { return p.ConsumerOf(h) == nil }
func (configMapPool) FailureDomain(h *corev1.ConfigMap) string { return h.Labels["fd"] }
func (configMapPool) Demoted(h *corev1.ConfigMap) bool         { return h.Labels["down"] == "true" }

func host(name, fd string, mod ...func(*corev1.ConfigMap)) *corev1.ConfigMap {
	h := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "1", Labels: map[string]string{"fd": fd}}}
	for _, m := range mod {
		m(h)
	}
	return h
}

func names(hs []*corev1.ConfigMap) []string {
	out := []string{}
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

// The claim identity is the first UID, kept in the annotation; a claim matches a machine by name and
// identity.
func TestIdentity(t *testing.T) {
	g := NewWithT(t)
	m := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "uid-2"}}
	g.Expect(ID(m, "claim-id")).To(Equal(types.UID("uid-2")))
	m.Annotations = map[string]string{"claim-id": "uid-1"}
	g.Expect(ID(m, "claim-id")).To(Equal(types.UID("uid-1")), "a moved machine keeps its first identity")
	c := &Consumer{Name: "m", ID: "uid-1"}
	g.Expect(c.Owns("m", "uid-1")).To(BeTrue())
	g.Expect(c.Owns("m", "uid-2")).To(BeFalse())
	g.Expect(c.Owns("n", "uid-1")).To(BeFalse(), "another machine carrying the identity does not own the claim")
	g.Expect((&Consumer{ID: "uid-1"}).Owns("m", "uid-1")).To(BeTrue(), "a claim without a name matches by identity")
	g.Expect((*Consumer)(nil).Owns("m", "uid-1")).To(BeFalse())
}

// Demoted hosts last, then the failure domain with the fewest hosts of the Cluster, then an order that
// depends on the claim identity; a failure domain filters.
func TestCandidatesOrder(t *testing.T) {
	g := NewWithT(t)
	mine := func(h *corev1.ConfigMap) { configMapPool{}.SetConsumer(h, Consumer{Name: "x", ID: "x", Cluster: "c1"}) }
	down := func(h *corev1.ConfigMap) { h.Labels["down"] = "true" }
	hosts := []*corev1.ConfigMap{host("a-used", "a", mine), host("a1", "a"), host("b1", "b"), host("b2", "b", down), host("c1", "c")}
	c, err := Candidates(configMapPool{}, hosts, &metav1.LabelSelector{}, "", Consumer{ID: "m", Cluster: "c1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(c)[:2]).To(ConsistOf("b1", "c1"), "domains without hosts of the cluster first")
	g.Expect(names(c)[2:]).To(Equal([]string{"a1", "b2"}), "then the busier domain, demoted hosts last")
	c, err = Candidates(configMapPool{}, hosts, &metav1.LabelSelector{}, "a", Consumer{ID: "m", Cluster: "c1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(c)).To(Equal([]string{"a1"}))
	// Different machines see equal hosts in different orders; one machine always in the same.
	firsts := map[string]bool{}
	for _, id := range []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"} {
		a, _ := Candidates(configMapPool{}, hosts, &metav1.LabelSelector{}, "", Consumer{ID: types.UID(id), Cluster: "c1"})
		b, _ := Candidates(configMapPool{}, hosts, &metav1.LabelSelector{}, "", Consumer{ID: types.UID(id), Cluster: "c1"})
		g.Expect(names(a)).To(Equal(names(b)))
		firsts[a[0].Name] = true
	}
	g.Expect(firsts).To(HaveLen(2))
}

// A claim remembered by this replica hides the host only while the cache still shows the version read
// before the claim; once the cache has moved on (claimed, or even released again) it is forgotten.
func TestOverlayOnlyWhileTheCacheIsStale(t *testing.T) {
	g := NewWithT(t)
	r := recentClaims{}
	r.remember(host("h", "a"), "1", "c1")
	stale := []*corev1.ConfigMap{host("h", "a")}
	overlay(r, configMapPool{}, stale)
	g.Expect(configMapPool{}.Available(stale[0])).To(BeFalse())
	g.Expect(configMapPool{}.ConsumerOf(stale[0]).Cluster).To(Equal("c1"), "the remembered claim counts for spreading")

	moved := []*corev1.ConfigMap{host("h", "a", func(h *corev1.ConfigMap) { h.ResourceVersion = "7" })}
	overlay(r, configMapPool{}, moved)
	g.Expect(configMapPool{}.Available(moved[0])).To(BeTrue())
	g.Expect(r).To(BeEmpty())

	r.remember(host("old", "a"), "1", "c1")
	r[client.ObjectKey{Namespace: "ns", Name: "old"}] = recentClaim{cluster: "c1", readVersion: "1", at: time.Now().Add(-2 * recentClaimTTL)}
	overlay(r, configMapPool{}, nil)
	g.Expect(r).To(BeEmpty(), "old claims are forgotten")
}

func TestFailureDomainsFromSpecAndSelectedHosts(t *testing.T) {
	g := NewWithT(t)
	pool := func(p string) func(*corev1.ConfigMap) { return func(h *corev1.ConfigMap) { h.Labels["pool"] = p } }
	hosts := []*corev1.ConfigMap{host("a", "rack-2", pool("p")), host("b", "rack-1", pool("p")), host("c", "rack-1", pool("p")), host("d", "rack-9", pool("q")), host("e", "", pool("p"))}
	sel := labels.SelectorFromSet(labels.Set{"pool": "p"})
	g.Expect(FailureDomains(configMapPool{}, hosts, sel, []string{"rack-0"}, 0)).To(Equal([]string{"rack-0", "rack-1", "rack-2"}))
	g.Expect(FailureDomains(configMapPool{}, hosts, sel, []string{"rack-0"}, 2)).To(Equal([]string{"rack-0", "rack-1"}))
	g.Expect(FailureDomains(configMapPool{}, nil, labels.Everything(), nil, 0)).To(BeEmpty())
}
