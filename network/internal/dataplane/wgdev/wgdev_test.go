package wgdev

import (
	"log/slog"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

func mustKey(g *WithT) wgtypes.Key {
	k, err := wgtypes.GeneratePrivateKey()
	g.Expect(err).NotTo(HaveOccurred())
	return k
}

func cidr(s string) net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return *n
}

// TestReconcilePeersIsDiffBased checks detection (kernel vs embedded, decided at run time) and that reconciling
// an unchanged peer set writes nothing, and a change writes only the changed peer.
func TestReconcilePeersIsDiffBased(t *testing.T) {
	g := NewWithT(t)
	lab := topo.New(t)
	ns := lab.AddNS("wg")
	name := lab.Prefix + "wg"
	err := topo.RunIn(ns, func() error {
		kernel := KernelAvailable(lab.Prefix + "probe")
		d, err := Open(name, 1420, true, slog.Default())
		if err != nil {
			return err
		}
		defer func() { _ = d.Close(true) }()
		if kernel {
			g.Expect(d.Kind).To(Equal(KindKernel))
		} else {
			g.Expect(d.Kind).To(Equal(KindUserspace))
		}
		changed, err := d.SetIdentity(mustKey(g), 0)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(changed).To(BeTrue())

		p1, p2, p3 := mustKey(g).PublicKey(), mustKey(g).PublicKey(), mustKey(g).PublicKey()
		desired := []Peer{
			{PublicKey: p1, Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820}, AllowedIPs: []net.IPNet{cidr("10.1.0.0/24")}},
			{PublicKey: p2, Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 51820}, AllowedIPs: []net.IPNet{cidr("10.2.0.0/24"), cidr("10.9.0.0/16")}, Keepalive: 25 * time.Second},
			{PublicKey: p3, AllowedIPs: []net.IPNet{cidr("10.3.0.0/24")}},
		}
		ch, err := d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Added).To(HaveLen(3))

		ch, err = d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Empty()).To(BeTrue(), "unchanged peers must not be rewritten: %+v", ch)

		// Allowed IPs in another order are the same configuration.
		desired[1].AllowedIPs = []net.IPNet{cidr("10.9.0.0/16"), cidr("10.2.0.0/24")}
		ch, err = d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Empty()).To(BeTrue())

		desired[0].AllowedIPs = append(desired[0].AllowedIPs, cidr("10.4.0.0/24"))
		desired = desired[:2]
		ch, err = d.ReconcilePeers(desired)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Updated).To(Equal([]wgtypes.Key{p1}))
		g.Expect(ch.Removed).To(Equal([]wgtypes.Key{p3}))
		g.Expect(ch.Added).To(BeEmpty())

		st, err := d.State()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Peers).To(HaveLen(2))
		g.Expect(allowed(st, p1)).To(ConsistOf("10.1.0.0/24", "10.4.0.0/24"))

		// A key rotation on an L3 link: the switched key (p1) gains its Site's prefix, which the old key (p2)
		// held. Upsert adds it to p1 without replacing p1's other allowed IPs (no window in which they are
		// gone) and the prefix moves off p2, which stays until ReconcilePeers removes it.
		desired[0].AllowedIPs = append(desired[0].AllowedIPs, cidr("10.9.0.0/16"))
		ch, err = d.UpsertPeers(desired[:1])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Updated).To(Equal([]wgtypes.Key{p1}))
		st, err = d.State()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allowed(st, p1)).To(ConsistOf("10.1.0.0/24", "10.4.0.0/24", "10.9.0.0/16"))
		g.Expect(allowed(st, p2)).To(ConsistOf("10.2.0.0/24"))

		// Dropping an allowed IP still replaces the set.
		desired[0].AllowedIPs = []net.IPNet{cidr("10.1.0.0/24")}
		ch, err = d.ReconcilePeers(desired[:1])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ch.Updated).To(Equal([]wgtypes.Key{p1}))
		g.Expect(ch.Removed).To(Equal([]wgtypes.Key{p2}))
		st, err = d.State()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Peers).To(HaveLen(1))
		g.Expect(allowed(st, p1)).To(ConsistOf("10.1.0.0/24"))
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
}

// allowed lists the allowed IPs of the peer with key k.
func allowed(st *wgtypes.Device, k wgtypes.Key) []string {
	for _, p := range st.Peers {
		if p.PublicKey == k {
			return ipnetStrings(p.AllowedIPs)
		}
	}
	return nil
}
