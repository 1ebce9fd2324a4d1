package daemon

import (
	"sort"
	"time"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/bpf"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/kernel"
	"github.com/yonder-dev/yonder/network/internal/dataplane/probe"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// Status is what the daemon reports about itself (debug dump and publication).
type Status struct {
	Node       string           `json:"node"`
	PublicKey  string           `json:"publicKey"`
	WireGuard  WireGuardStatus  `json:"wireGuard"`
	Protocols  []netv1.Protocol `json:"protocols"`
	Attachment bpf.Attachment   `json:"ebpfAttachment"`
	// KernelTunnelTypes are the tunnel link types the kernel can create.
	KernelTunnelTypes []netv1.Protocol           `json:"kernelTunnelTypes"`
	Hops              []desired.NextHop          `json:"hops"`
	Routes            []desired.Route            `json:"routes"`
	Probes            map[string]probe.PeerState `json:"probes"`
	Down              []string                   `json:"down"`
	Failovers         uint64                     `json:"failovers"`
	Writes            kernel.Writes              `json:"writes"`
	MapPrefixes       int                        `json:"mapPrefixes"`
	MapGroups         int                        `json:"mapGroups"`
	Counters          [6]uint64                  `json:"ebpfCounters"`
	Applied           int64                      `json:"applied"`
	LastError         string                     `json:"lastError,omitempty"`
	// ApplyFailures counts applies that failed (each is retried with backoff).
	ApplyFailures uint64 `json:"applyFailures"`
	// Reachability is the node's reachability verdict (nil until the first one) and Checkers the peers
	// asked for it.
	Reachability *netv1.NodeReachability `json:"reachability,omitempty"`
	Checkers     []string                `json:"checkers,omitempty"`
}

// WireGuardStatus describes the WireGuard device.
type WireGuardStatus struct {
	Device     string       `json:"device"`
	Kind       wgdev.Kind   `json:"kind"`
	ListenPort int          `json:"listenPort"`
	Peers      []PeerStatus `json:"peers"`
	// Slot is the slot of the published key; NextPublicKey is set while a rotation is in progress.
	Slot          int    `json:"slot"`
	NextPublicKey string `json:"nextPublicKey,omitempty"`
	// Rotation is "" (none), "handshaking" (the next slot is up, waiting for every peer's handshake) or
	// "draining" (switched; the previous slot stays until peers stop using it).
	Rotation string `json:"rotation,omitempty"`
	// OtherDevice is the second slot's device while one is up.
	OtherDevice string `json:"otherDevice,omitempty"`
}

// PeerStatus is one WireGuard peer as the device reports it.
type PeerStatus struct {
	PublicKey    string  `json:"publicKey"`
	Endpoint     string  `json:"endpoint"`
	HandshakeAge float64 `json:"handshakeAgeSeconds"`
	RxBytes      int64   `json:"rxBytes"`
	TxBytes      int64   `json:"txBytes"`
}

// Applied reports whether the last plan was applied, and the last error.
func (d *Daemon) Applied() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applied > 0 && d.lastErr == "", d.lastErr
}

// Dataplane is the NodeNetwork status summary of what the daemon detected and uses.
func (d *Daemon) Dataplane() *netv1.NodeDataplaneStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DataplaneOf(Status{WireGuard: WireGuardStatus{Kind: d.wgs[d.slots.Current].Kind}, KernelTunnelTypes: d.tunnels, Attachment: d.attach})
}

// DataplaneOf summarises a daemon status (as the debug dump reports it) for NodeNetwork.status.
func DataplaneOf(st Status) *netv1.NodeDataplaneStatus {
	return &netv1.NodeDataplaneStatus{WireGuard: netv1.WireGuardImplementation(st.WireGuard.Kind),
		KernelTunnelTypes: st.KernelTunnelTypes, EBPFAttachMode: netv1.EBPFAttachMode(st.Attachment)}
}

// Status returns the daemon's state.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	wg := d.wgs[d.slots.Current]
	st := Status{Node: d.opt.Node, PublicKey: d.keys[d.slots.Current].PublicKey().String(), Attachment: d.attach, KernelTunnelTypes: d.tunnels,
		Protocols: []netv1.Protocol{netv1.ProtocolWireGuard, netv1.ProtocolVXLAN},
		Routes:    d.desired.Routes, Failovers: d.failovers, Writes: d.ap.Writes, Applied: d.applied, LastError: d.lastErr,
		ApplyFailures: d.applyFailures, Reachability: d.reach}
	for _, c := range d.checkers {
		st.Checkers = append(st.Checkers, c.String())
	}
	st.WireGuard = WireGuardStatus{Device: wg.Name, Kind: wg.Kind, Slot: d.slots.Current, Rotation: d.rotationPhase()}
	if d.slots.Rotating() {
		st.WireGuard.NextPublicKey = d.keys[d.slots.Next].PublicKey().String()
	}
	if o := d.ownWireGuard().Other; o != nil {
		st.WireGuard.OtherDevice = o.Name
	}
	if dev, err := wg.State(); err == nil {
		st.WireGuard.ListenPort = dev.ListenPort
		for _, p := range dev.Peers {
			ps := PeerStatus{PublicKey: p.PublicKey.String(), RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes, HandshakeAge: -1}
			if p.Endpoint != nil {
				ps.Endpoint = p.Endpoint.String()
			}
			if !p.LastHandshakeTime.IsZero() {
				ps.HandshakeAge = time.Since(p.LastHandshakeTime).Seconds()
			}
			st.WireGuard.Peers = append(st.WireGuard.Peers, ps)
		}
	}
	for _, h := range d.desired.Hops {
		st.Hops = append(st.Hops, h)
	}
	sort.Slice(st.Hops, func(i, j int) bool { return st.Hops[i].Key() < st.Hops[j].Key() })
	for k := range d.down {
		st.Down = append(st.Down, k)
	}
	sort.Strings(st.Down)
	if d.prober != nil {
		st.Probes = d.prober.States()
	}
	st.MapPrefixes, st.MapGroups = d.dp.Sizes()
	st.Counters, _ = d.dp.Counters()
	return st
}

// Close detaches the program. Devices, routes and map-independent kernel state stay (a restart adopts them and
