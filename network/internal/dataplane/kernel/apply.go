// Package kernel applies a node's desired dataplane (package desired) to the kernel with diffs: VXLAN
// devices with static FDB and neighbour entries, the WireGuard peers (dialled, or accepted without an
// endpoint when they sit behind NAT), routes with the path MTU, the iptables rules and the eBPF maps. An
// unchanged object is never rewritten, so a restarted daemon adopts what it finds.
package kernel

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/yonder-dev/yonder/network/internal/dataplane/bpf"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// viaWireGuardL3 keys the WireGuard device itself in the Applier's device map (L3 routes).
const viaWireGuardL3 desired.Via = "wireguard-l3"

// RouteProtocol marks the routes this daemon owns (so stale ones can be found after a restart).
const RouteProtocol = netlink.RouteProtocol(0x79)

// Devices names the node's devices.
type Devices struct {
	VXLAN     string // VXLAN over the underlay
	VXLANWG   string // VXLAN inside WireGuard
	WireGuard string
	PodBridge string
}

// Writes counts kernel writes, by kind (the restart test expects none for unchanged state).
type Writes struct {
	Links, FDB, Neigh, Routes, Peers, Maps int
	// Filter counts writes of the underlay VXLAN filter (VXLANFilterChain and its jump).
	Filter int
	// WireGuardDevice counts the address and routes of the WireGuard device (an embedded device is new after a
	// restart, and the kernel removed its routes with the old one).
	WireGuardDevice int
}

// Total is the number of writes.
func (w Writes) Total() int {
	return w.Links + w.FDB + w.Neigh + w.Routes + w.Peers + w.Maps + w.WireGuardDevice + w.Filter
}

// Applier programs the kernel; it runs inside the node's network namespace. One goroutine uses it.
type Applier struct {
	Dev Devices
	BPF *bpf.Datapath
	Log *slog.Logger
	// Writes accumulates over the Applier's life.
	Writes Writes
	// retiring holds, per WireGuard device, the peers no hop needs any more and since when (see
	// PeerRetireDelay).
	retiring map[string]map[wgtypes.Key]time.Time
}

// PeerRetireDelay is how long a WireGuard peer that no hop needs any more (a peer's previous key after its
// switch, a node that left) stays on the device after the Apply that pointed the FDB and routes away from it.
// Packets routed to it just before are still queued inside the WireGuard implementation (the TUN's queue,
// the peer's encryption and send queues; received ones not yet delivered): removing the peer drops them
// (wireguard-go's Peer.Stop discards its queues), which lost a datagram of TestWireGuardL3's flow under CPU
// load. Shorter than a rotation's drain (drainShortest, 10 s), so the peer's old device is still up meanwhile.
const PeerRetireDelay = 3 * time.Second

// Redial forgets the WireGuard sessions with the given peers (public keys) on every device of own, so the
// next Apply adds them afresh and the next packet starts a handshake. Invalid keys are skipped.
func (a *Applier) Redial(own OwnWireGuard, publicKeys []string) error {
	var keys []wgtypes.Key
	for _, k := range publicKeys {
		if pk, err := wgtypes.ParseKey(k); err == nil {
			keys = append(keys, pk)
		}
	}
	devs := []*wgdev.Device{own.Send}
	if own.Other != nil {
		devs = append(devs, own.Other)
	}
	for _, d := range devs {
		if err := d.RemovePeers(keys); err != nil {
			return err
		}
		a.Writes.Peers += len(keys)
	}
	return nil
}

// OwnWireGuard is the node's side of WireGuard for one Apply. Send carries traffic to the peers: their
// addresses are routed to it, with its slot's address as source. Other, while a key rotation brings up the
// next slot or the previous slot drains, has the same peers and its own slot's address but no routes, so
// what peers still send to it arrives.
type OwnWireGuard struct {
	Send      *wgdev.Device
	SendSlot  int
	Other     *wgdev.Device
	OtherSlot int
}

// PersistentKeepalive is sent on every WireGuard peer: it keeps NAT mappings (and stateful firewalls) of the
// dialling end open, and starts a handshake as soon as a peer is configured.
const PersistentKeepalive = 25 * time.Second

// Apply makes the kernel match st: the underlay VXLAN filter (first, so that it is in force before the
// underlay VXLAN device exists to decapsulate anyone's packets), devices (a VXLAN device only while a next
// hop uses it), addresses, WireGuard peers (new and changed first), FDB and neighbour entries, routes, peers
// that left (PeerRetireDelay after nothing points at them), the eBPF maps and, last, the VXLAN devices no
// next hop uses any more. Each phase is a diff, so a retry after a failure repeats only what is still missing.
func (a *Applier) Apply(st desired.State, own OwnWireGuard) error {
	r := &applyRun{a: a, st: st, own: own}
	for _, phase := range []struct {
		name string
		run  func() error
	}{
		{"underlay VXLAN filter", r.filterVXLAN},
		{"devices", r.devices},
		{"WireGuard peers", r.upsertPeers},
		{"FDB and neighbours", r.neighbours},
		{"routes", r.routes},
		{"WireGuard peers that left", r.removePeers},
		{"eBPF maps", r.maps},
		{"unused VXLAN devices", r.removeVXLAN},
	} {
		if err := phase.run(); err != nil {
			return fmt.Errorf("failed to apply the dataplane (%s): %w", phase.name, err)
		}
	}
	return nil
}

// applyRun is one Apply; its methods are the phases, in order.
type applyRun struct {
	a     *Applier
	st    desired.State
	own   OwnWireGuard
	links map[desired.Via]netlink.Link
	wg    netlink.Link
	src   netip.Addr // this node's address inside WireGuard (the sending slot's)
	peers []wgdev.Peer
}

// vxlanDevice is one of the node's two VXLAN devices and the next hops that use it.
type vxlanDevice struct {
	via  desired.Via
	name string
	vni  int
	port int
	mtu  int
}

// vxlanDevices are the underlay device (VNI 1, UDP 4789) and the one inside WireGuard (VNI 2, UDP 4790).
func (r *applyRun) vxlanDevices() []vxlanDevice {
	return []vxlanDevice{
		{desired.ViaVXLAN, r.a.Dev.VXLAN, 1, desired.DefaultVXLANPort, r.st.VXLANMTU},
		{desired.ViaWireGuard, r.a.Dev.VXLANWG, 2, desired.VXLANOverWireGuardPort, r.st.WGMTU},
	}
}

// usesVia reports whether a next hop of st is reached over via's device. Next hops are symmetric (both ends
// of an intra-site pair or a link compute each other), so a device no hop uses receives nothing either: an
// underlay VXLAN packet could only come from a peer outside the plan (VXLANFilterChain drops those), a
// VXLAN-in-WireGuard packet only from a WireGuard peer, and every WireGuard peer is a hop over that device.
// That holds on WireGuard L3 links too: they keep their hop over the inner device, because a peer that
// rotates its key sends VXLAN inside WireGuard meanwhile (Features.Rotating).
func usesVia(st desired.State, via desired.Via) bool {
	for _, h := range st.Hops {
		if h.Via == via {
			return true
		}
	}
	return false
}

// devices ensures the VXLAN devices the plan uses and the WireGuard devices' addresses. A VXLAN device
// binds its UDP port on every address of the node, so one no next hop uses is not created (and is removed by
// removeVXLAN once nothing points at it): a node without VXLAN links listens on no VXLAN port.
func (r *applyRun) devices() error {
	r.links = map[desired.Via]netlink.Link{}
	for _, v := range r.vxlanDevices() {
		if !usesVia(r.st, v.via) {
			continue
		}
		l, err := r.a.EnsureVXLAN(v.name, v.vni, v.port, v.mtu, r.st.MAC)
		if err != nil {
			return err
		}
		r.links[v.via] = l
	}
	var err error
	if r.wg, err = netlink.LinkByName(r.own.Send.Name); err != nil {
		return fmt.Errorf("failed to find %s: %w", r.own.Send.Name, err)
	}
	if r.src, err = desired.SlotAddr(r.st.TunnelPrefix, r.own.SendSlot); err != nil {
		return fmt.Errorf("failed to address %s: %w", r.own.Send.Name, err)
	}
	if err := r.a.EnsureAddr(r.wg, r.src); err != nil {
		return err
	}
	if r.own.Other != nil {
		ol, err := netlink.LinkByName(r.own.Other.Name)
		if err != nil {
			return fmt.Errorf("failed to find %s: %w", r.own.Other.Name, err)
		}
		addr, err := desired.SlotAddr(r.st.TunnelPrefix, r.own.OtherSlot)
		if err != nil {
			return fmt.Errorf("failed to address %s: %w", r.own.Other.Name, err)
		}
		if err := r.a.EnsureAddr(ol, addr); err != nil {
			return err
		}
	}
	r.links[viaWireGuardL3] = r.wg
	return nil
}

// removeVXLAN removes the VXLAN devices no next hop uses any more (closing their UDP ports). It runs last,
// after the routes and eBPF maps stopped pointing at them, so no packet is sent to a device while it goes.
func (r *applyRun) removeVXLAN() error {
	for _, v := range r.vxlanDevices() {
		if _, used := r.links[v.via]; used {
			continue
		}
		if err := r.a.RemoveVXLAN(v.name); err != nil {
			return err
		}
	}
	return nil
}

// wireGuardDevices are the devices that get the peers: the sending slot's and, during a rotation or drain,
// the other one.
func (r *applyRun) wireGuardDevices() []*wgdev.Device {
	if r.own.Other != nil {
		return []*wgdev.Device{r.own.Send, r.own.Other}
	}
	return []*wgdev.Device{r.own.Send}
}

// upsertPeers adds and updates WireGuard peers: allowed IPs are the peer's address of the slot the key
// belongs to (/32), both while it rotates; a peer behind NAT gets no endpoint (its handshake brings it).
func (r *applyRun) upsertPeers() error {
	for _, h := range r.st.Hops {
		if h.Via != desired.ViaWireGuard {
			continue
		}
		r.addPeer(h, h.PublicKey, h.WGAddr, h.WGPort, h.L3Prefixes)
		if h.NextPublicKey != "" {
			r.addPeer(h, h.NextPublicKey, h.NextWGAddr, h.NextWGPort, nil)
		}
	}
	// Peers that left are removed last (removePeers), PeerRetireDelay after the FDB and routes stopped
	// pointing at them (a peer that switched its key slot keeps receiving until then).
	for _, dev := range r.wireGuardDevices() {
		ch, err := dev.UpsertPeers(r.peers)
		if err != nil {
			return err
		}
		r.a.Writes.Peers += len(ch.Added) + len(ch.Updated)
	}
	return nil
}

func (r *applyRun) addPeer(h desired.NextHop, key string, addr netip.Addr, port int, l3 []netip.Prefix) {
	pk, err := wgtypes.ParseKey(key)
	if err != nil {
		r.a.Log.Error("Ignoring peer with an invalid public key", "node", h.Node)
		return
	}
	allowed := []net.IPNet{{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	for _, p := range l3 {
		allowed = append(allowed, *prefixNet(p))
	}
	p := wgdev.Peer{PublicKey: pk, AllowedIPs: allowed, Keepalive: PersistentKeepalive}
	if !h.Accept {
		p.Endpoint = &net.UDPAddr{IP: h.Underlay.AsSlice(), Port: port}
	}
	r.peers = append(r.peers, p)
}

// neighbours syncs the FDB (tunnel MAC → outer destination) and neighbour (tunnel address → tunnel MAC)
// entries of the VXLAN devices.
//
// The WireGuard device (r.links[viaWireGuardL3], there for the L3 routes and eBPF backends) is left alone: no
// hop is reached through a neighbour on it, and its only neighbour is the kernel's own NOARP entry (key
// 0.0.0.0: one per point-to-point device) that every packet routed into the device uses. Syncing it deleted
// that entry on every Apply while traffic flowed through it, and a packet sent between the kernel marking the
// entry FAILED and unlinking it turns it INCOMPLETE with a timer holding a reference: the unlink then fails,
// the entry stays, and (no ARP on the device) every later packet to every WireGuard peer queues on it until
// the next Apply deletes it again, which answers each queued packet with an ICMP host unreachable to its
// source. TestKeyRotationLosesNothing lost up to ~90 datagrams that way (replies encapsulated at the gateway,
// ICMP from the gateway to itself), until the probes of the stalled peers went down and their Apply cleared it.
func (r *applyRun) neighbours() error {
	for via, l := range r.links {
		if via == viaWireGuardL3 {
			continue
		}
		want := map[string]desired.NextHop{}
		for _, h := range r.st.Hops {
			if h.Via == via {
				want[h.MAC.String()] = h
			}
		}
		if err := r.a.syncFDB(l, want, via); err != nil {
			return err
		}
		if err := r.a.syncNeigh(l, want); err != nil {
			return err
		}
	}
	return nil
}

// routes syncs the WireGuard tunnel /32s and every prefix's route via its primary member.
func (r *applyRun) routes() error {
	return r.a.syncRoutes(wantedRoutes(r.st, r.links, r.wg, r.src), r.wg.Attrs().Index)
}

// removePeers removes the WireGuard peers no hop needs any more once they have been unneeded for
// PeerRetireDelay (a later Apply does: RetireDue).
func (r *applyRun) removePeers() error {
	now := time.Now()
	want := map[wgtypes.Key]bool{}
	for _, p := range r.peers {
		want[p.PublicKey] = true
	}
	if r.a.retiring == nil {
		r.a.retiring = map[string]map[wgtypes.Key]time.Time{}
	}
	devs := map[string]bool{}
	for _, dev := range r.wireGuardDevices() {
		devs[dev.Name] = true
		cur, err := dev.State()
		if err != nil {
			return err
		}
		since, kept := r.a.retiring[dev.Name], map[wgtypes.Key]time.Time{}
		var remove []wgtypes.Key
		for _, p := range cur.Peers {
			if want[p.PublicKey] {
				continue
			}
			t, ok := since[p.PublicKey]
			if !ok {
				t = now
			}
			if now.Sub(t) >= PeerRetireDelay {
				remove = append(remove, p.PublicKey)
			} else {
				kept[p.PublicKey] = t
			}
		}
		if err := dev.RemovePeers(remove); err != nil {
			return err
		}
		r.a.Writes.Peers += len(remove)
		r.a.retiring[dev.Name] = kept
	}
	// A device that is no longer used (a drained slot) takes its peers with it.
	for name := range r.a.retiring {
		if !devs[name] {
			delete(r.a.retiring, name)
		}
	}
	return nil
}

// RetireDue reports whether a WireGuard peer waits for removal and its PeerRetireDelay has passed: the
// caller applies again.
func (a *Applier) RetireDue(now time.Time) bool {
	for _, peers := range a.retiring {
		for _, t := range peers {
			if now.Sub(t) >= PeerRetireDelay {
				return true
			}
		}
	}
	return false
}

// maps syncs the eBPF program's prefixes and groups.
func (r *applyRun) maps() error {
	if r.a.BPF == nil {
		return nil
	}
	st, err := r.a.BPF.Sync(BPFDesired(r.st, r.links))
	if err != nil {
		return err
	}
	r.a.Writes.Maps += st.Updated + st.Deleted
	return nil
}
