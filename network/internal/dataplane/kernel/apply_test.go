package kernel

import (
	"log/slog"
	"net"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// applyLab applies, in a private namespace, the plan of a node (10.30.1.0/24) with one WireGuard hop p
// (10.40.1.0/24, reached over the VXLAN device inside WireGuard) and runs f there.
func applyLab(t *testing.T, f func(g *WithT, a *Applier, st desired.State, own OwnWireGuard)) {
	t.Helper()
	g := NewWithT(t)
	lab := topo.New(t)
	ns := lab.AddNS("ap")
	err := topo.RunIn(ns, func() error {
		w, err := wgdev.Open(lab.Prefix+"wg", 1420, true, slog.Default())
		if err != nil {
			return err
		}
		defer func() { _ = w.Close(true) }()
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return err
		}
		if _, err := w.SetIdentity(k, 0); err != nil {
			return err
		}
		pk, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return err
		}
		p := desired.NextHop{Node: "p", Via: desired.ViaWireGuard, Underlay: netip.MustParseAddr("192.0.2.2"),
			Tunnel: netip.MustParseAddr("10.40.1.0"), MAC: desired.NodeMAC("p"), PublicKey: pk.PublicKey().String(),
			WGAddr: netip.MustParseAddr("10.40.1.0"), WGPort: 51820, MTU: 1370}
		st := desired.State{Self: "n", Tunnel: netip.MustParseAddr("10.30.1.0"),
			TunnelPrefix: netip.MustParsePrefix("10.30.1.0/24"), MAC: desired.NodeMAC("n"), VXLANMTU: 1430,
			WGMTU: 1370, Hops: map[string]desired.NextHop{p.Key(): p},
			Routes: []desired.Route{{Prefix: netip.MustParsePrefix("10.40.0.0/16"), Members: []string{p.Key()}, MTU: 1370}}}
		a := &Applier{Dev: Devices{VXLAN: "yvx", VXLANWG: "yvw", WireGuard: w.Name}, Log: slog.Default()}
		own := OwnWireGuard{Send: w}
		g.Expect(a.Apply(st, own)).To(Succeed())
		f(g, a, st, own)
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
}

// The WireGuard device's only neighbour is the kernel's NOARP entry that every packet routed into it uses.
// Apply must never delete it: deleting it under traffic can leave it INCOMPLETE, queueing (losing) the
// packets to every WireGuard peer until the next Apply (TestKeyRotationLosesNothing's rare loss), and an
// unchanged plan must cost no writes anyway.
func TestApplyLeavesTheWireGuardDevicesNeighbourAlone(t *testing.T) {
	applyLab(t, func(g *WithT, a *Applier, st desired.State, own OwnWireGuard) {
		// A packet to the peer's WireGuard address goes into the WireGuard device and creates the entry.
		c, err := net.Dial("udp4", "10.40.1.0:9")
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = c.Close() }()
		_, err = c.Write([]byte("x"))
		g.Expect(err).NotTo(HaveOccurred())
		wg, err := netlink.LinkByName(own.Send.Name)
		g.Expect(err).NotTo(HaveOccurred())
		neighs := func() []netlink.Neigh {
			ns, err := netlink.NeighList(wg.Attrs().Index, unix.AF_INET)
			g.Expect(err).NotTo(HaveOccurred())
			return ns
		}
		before := neighs()
		g.Expect(before).NotTo(BeEmpty(), "sending into the WireGuard device creates the kernel's neighbour entry")

		w := a.Writes
		g.Expect(a.Apply(st, own)).To(Succeed())
		g.Expect(a.Writes).To(Equal(w), "an unchanged plan writes nothing")
		g.Expect(neighs()).To(HaveLen(len(before)), "the WireGuard device's neighbour entry is left alone")
	})
}

// A wanted neighbour with the wrong MAC is replaced in place (one write), not deleted and added again: in
// between, packets to that next hop would have no neighbour entry.
func TestApplyReplacesAWrongNeighbourInPlace(t *testing.T) {
	applyLab(t, func(g *WithT, a *Applier, st desired.State, own OwnWireGuard) {
		vw, err := netlink.LinkByName(a.Dev.VXLANWG)
		g.Expect(err).NotTo(HaveOccurred())
		wrong := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
		g.Expect(netlink.NeighSet(&netlink.Neigh{LinkIndex: vw.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			IP: net.ParseIP("10.40.1.0"), HardwareAddr: wrong})).To(Succeed())

		w := a.Writes
		g.Expect(a.Apply(st, own)).To(Succeed())
		g.Expect(a.Writes.Neigh-w.Neigh).To(Equal(1), "one replace, no delete")
		ns, err := netlink.NeighList(vw.Attrs().Index, unix.AF_INET)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ns).To(HaveLen(1))
		g.Expect(ns[0].HardwareAddr.String()).To(Equal(desired.NodeMAC("p").String()))
		g.Expect(ns[0].State & netlink.NUD_PERMANENT).NotTo(BeZero())
	})
}
