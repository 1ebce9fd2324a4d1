// Package daemon is yonder-net-node: it owns the node's key, devices, routes, eBPF program and probes, reads
// the node's view of the route plan and applies it with diffs, and publishes what peers need to know about it.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/bpf"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/kernel"
	"github.com/yonder-dev/yonder/network/internal/dataplane/keys"
	"github.com/yonder-dev/yonder/network/internal/dataplane/probe"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// Options configure the daemon.
type Options struct {
	Node        string
	StateDir    string
	InputFile   string // the node's view of the plan (desired.Input as YAML/JSON), re-read when it changes
	PublishFile string // where the NodeNetworkSpec is written (the API publisher reads it)
	Devices     kernel.Devices
	UnderlayDev string
	Endpoint    string // address peers dial; default: the underlay device's first IPv4 address
	// ExternalEndpoint is the address remote Sites dial (public/NATed); default: Endpoint.
	ExternalEndpoint string
	WGPort           int
	ProbePort        int
	Kernel           bool // try kernel WireGuard first
	DebugAddr        string
	CNIConfDir       string
	Attach           bpf.Attachment // "" = detect
	// WireGuardL3 carries pod traffic directly over WireGuard where both Sites of a link have one active
	// gateway (desired.Features.WireGuardL3); every gateway must set the same value.
	WireGuardL3 bool
	Log         *slog.Logger
}

// Daemon is a running yonder-net-node.
type Daemon struct {
	opt    Options
	mtu    int // of the WireGuard devices
	dp     *bpf.Datapath
	attach bpf.Attachment
	ap     *kernel.Applier
	prober *probe.Prober
	// tunnels are the tunnel link types the kernel can create (detected at start).
	tunnels []netv1.Protocol

	mu sync.Mutex
	// WireGuard slots (see netv1.NodeNetworkSpec.WireGuardSlot): slots.Current carries the published key;
	// during a rotation slots.Next is up too; after the switch the previous slot drains (drain).
	slots keys.Slots
	keys  [2]wgtypes.Key
	wgs   [2]*wgdev.Device
	rot   rotation

	input     *desired.Input
	desired   desired.State
	down      map[string]bool
	failovers uint64
	applied   int64
	lastErr   string
	kick      chan struct{}
}

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
	Counters          [5]uint64                  `json:"ebpfCounters"`
	Applied           int64                      `json:"applied"`
	LastError         string                     `json:"lastError,omitempty"`
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

// New prepares the node: sysctls, key, WireGuard device, eBPF program. It does not need a plan yet.
func New(opt Options) (*Daemon, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	d := &Daemon{opt: opt, down: map[string]bool{}, kick: make(chan struct{}, 1)}
	if err := kernel.Setup(opt.Devices); err != nil {
		return nil, err
	}
	if err := kernel.Clamp(SlotDevice(opt.Devices.WireGuard, 0), SlotDevice(opt.Devices.WireGuard, 1)); err != nil {
		return nil, err
	}
	d.tunnels = kernel.KernelTunnelTypes()
	d.mtu = 1420
	if l, err := netlink.LinkByName(opt.UnderlayDev); err == nil {
		d.mtu = l.Attrs().MTU - desired.WireGuardOverhead
	}
	if err := d.openSlots(); err != nil {
		return nil, err
	}
	var err error
	if d.dp, err = bpf.Load(); err != nil {
		return nil, err
	}
	d.ap = &kernel.Applier{Dev: opt.Devices, BPF: d.dp, Log: opt.Log}
	opt.Log.Info("Dataplane ready", "node", opt.Node, "wireguard", d.wgs[d.slots.Current].Kind, "slot", d.slots.Current,
		"kernelTunnels", d.tunnels, "publicKey", d.keys[d.slots.Current].PublicKey().String())
	return d, nil
}

// Publication is what the node publishes in its NodeNetwork.
func (d *Daemon) Publication() (netv1.NodeNetworkSpec, error) {
	d.mu.Lock()
	cur, slots := d.keys[d.slots.Current], d.slots
	next := d.keys[max(slots.Next, 0)]
	d.mu.Unlock()
	spec := netv1.NodeNetworkSpec{
		PublicKey: cur.PublicKey().String(), WireGuardSlot: int32(slots.Current), //nolint:gosec // 0 or 1
		Ports:     netv1.Ports{WireGuard: int32(d.opt.WGPort), VXLAN: desired.DefaultVXLANPort, Probe: int32(d.opt.ProbePort)}, //nolint:gosec // ports fit in 16 bits
		Protocols: []netv1.Protocol{netv1.ProtocolWireGuard, netv1.ProtocolVXLAN},
	}
	if slots.Rotating() {
		spec.NextPublicKey = next.PublicKey().String()
	}
	l, err := netlink.LinkByName(d.opt.UnderlayDev)
	if err != nil {
		return spec, fmt.Errorf("failed to find underlay device %s: %w", d.opt.UnderlayDev, err)
	}
	spec.UnderlayMTU = int32(l.Attrs().MTU) //nolint:gosec // MTUs fit in 32 bits
	ep := d.opt.Endpoint
	if ep == "" {
		as, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(as) == 0 {
			return spec, fmt.Errorf("failed to find an IPv4 address on %s: %w", d.opt.UnderlayDev, err)
		}
		ep = as[0].IP.String()
	}
	ext := d.opt.ExternalEndpoint
	if ext == "" {
		ext = ep
	}
	spec.Endpoints = []netv1.Endpoint{{Address: ep, Type: netv1.EndpointInternal}, {Address: ext, Type: netv1.EndpointExternal}}
	return spec, nil
}

func (d *Daemon) publish() error {
	if d.opt.PublishFile == "" {
		return nil
	}
	spec, err := d.Publication()
	if err != nil {
		return err
	}
	b, err := yaml.Marshal(spec)
	if err != nil {
		return fmt.Errorf("failed to encode publication: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(d.opt.PublishFile), 0o750); err != nil {
		return fmt.Errorf("failed to create directory of %s: %w", d.opt.PublishFile, err)
	}
	tmp := d.opt.PublishFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil { //nolint:gosec // public data (public key, endpoints)
		return fmt.Errorf("failed to write publication: %w", err)
	}
	if err := os.Rename(tmp, d.opt.PublishFile); err != nil {
		return fmt.Errorf("failed to write publication: %w", err)
	}
	return nil
}

// Run applies the plan whenever the input or a probe changes, until ctx ends.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.publish(); err != nil {
		return err
	}
	var err error
	d.prober, err = probe.Listen(d.opt.ProbePort, 200*time.Millisecond, 3, d.onProbe)
	if err != nil {
		return err
	}
	go d.prober.Run(ctx)
	if d.opt.DebugAddr != "" {
		go d.serveDebug(ctx)
	}
	var lastMod time.Time
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		changed := false
		if st, err := os.Stat(d.opt.InputFile); err == nil && !st.ModTime().Equal(lastMod) {
			if in, err := readInput(d.opt.InputFile); err == nil {
				lastMod = st.ModTime()
				d.mu.Lock()
				d.input = in
				d.mu.Unlock()
				changed = true
			} else {
				d.opt.Log.Error("Reading input", "err", err)
			}
		}
		select {
		case <-d.kick:
			changed = true
		default:
		}
		if changed {
			d.reconcile()
		}
		if d.attach == "" && d.applied > 0 {
			d.tryAttach()
		}
		d.rotationStep()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.kick:
			d.reconcile()
		}
	}
}

func (d *Daemon) tryAttach() {
	l, err := netlink.LinkByName(d.opt.Devices.PodBridge)
	if err != nil {
		return
	}
	a, err := d.dp.Attach(l.Attrs().Index, d.opt.Attach)
	if err != nil {
		d.opt.Log.Error("Attaching eBPF program", "err", err)
		return
	}
	d.mu.Lock()
	d.attach = a
	d.mu.Unlock()
	d.opt.Log.Info("Attached eBPF program", "device", d.opt.Devices.PodBridge, "mode", a)
	// Transit traffic (a gateway forwarding between tunnels) takes the same per-flow choice.
	for _, n := range []string{d.opt.Devices.VXLAN, d.opt.Devices.VXLANWG} {
		if l, err := netlink.LinkByName(n); err == nil {
			if _, err := d.dp.Attach(l.Attrs().Index, a); err != nil {
				d.opt.Log.Error("Attaching eBPF program", "device", n, "err", err)
			}
		}
	}
}

func (d *Daemon) onProbe(key string, up bool) {
	d.mu.Lock()
	if up {
		delete(d.down, key)
	} else {
		d.down[key] = true
		d.failovers++
	}
	d.mu.Unlock()
	d.opt.Log.Info("Peer health changed", "peer", key, "up", up)
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *Daemon) reconcile() {
	d.mu.Lock()
	in := d.input
	down := map[string]bool{}
	for k := range d.down {
		down[k] = true
	}
	own := d.ownWireGuard()
	feat := desired.Features{WireGuardL3: d.opt.WireGuardL3, Rotating: d.slots.Rotating() || d.rot.drain != nil}
	d.mu.Unlock()
	if in == nil {
		return
	}
	des, err := desired.ComputeWith(*in, down, feat)
	if err == nil {
		err = d.ap.Apply(des, own)
	}
	if err == nil && d.opt.CNIConfDir != "" {
		err = WriteCNIConfig(d.opt.CNIConfDir, d.opt.Devices.PodBridge, in.PodCIDRs, des.VXLANMTU)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.lastErr = err.Error()
		d.opt.Log.Error("Applying plan", "err", err)
		return
	}
	d.lastErr = ""
	d.desired = des
	d.applied++
	// Probe the members of multi-member groups (gateways): those are the ones traffic can move away from.
	var targets []probe.Target
	seen := map[string]bool{}
	for _, r := range des.Routes {
		if len(r.Members) < 2 && !down[firstOr(r.Members)] {
			continue
		}
		for _, m := range r.Members {
			seen[m] = true
		}
	}
	for k := range d.down {
		seen[k] = true
	}
	for k := range seen {
		h, ok := des.Hops[k]
		if !ok {
			continue
		}
		addr := h.Underlay
		if h.Via == desired.ViaWireGuard {
			addr = h.WGAddr
		}
		targets = append(targets, probe.Target{Key: k, Addr: netip.AddrPortFrom(addr, uint16(h.ProbePort))}) //nolint:gosec // ports fit in 16 bits
	}
	// Members currently down stay monitored (they are absent from des.Routes' groups).
	if in != nil {
		all, _ := desired.Compute(*in, nil)
		// Peers that left the plan are no longer down (nor probed).
		for k := range d.down {
			if _, ok := all.Hops[k]; !ok {
				delete(d.down, k)
			}
		}
		for _, r := range all.Routes {
			if len(r.Members) < 2 {
				continue
			}
			for _, m := range r.Members {
				if seen[m] {
					continue
				}
				seen[m] = true
				h := all.Hops[m]
				addr := h.Underlay
				if h.Via == desired.ViaWireGuard {
					addr = h.WGAddr
				}
				targets = append(targets, probe.Target{Key: m, Addr: netip.AddrPortFrom(addr, uint16(h.ProbePort))}) //nolint:gosec // ports fit in 16 bits
			}
		}
	}
	iv, th := time.Duration(in.Plan.HealthProbe.IntervalMilliseconds)*time.Millisecond, int(in.Plan.HealthProbe.FailureThreshold)
	if iv <= 0 {
		iv = 200 * time.Millisecond
	}
	if th <= 0 {
		th = 3
	}
	d.prober.SetTiming(iv, th)
	d.prober.SetTargets(targets)
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func readInput(path string) (*desired.Input, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the operator-configured input file
	if err != nil {
		return nil, fmt.Errorf("failed to read input %s: %w", path, err)
	}
	in := &desired.Input{}
	if err := yaml.Unmarshal(b, in); err != nil {
		return nil, fmt.Errorf("failed to parse input %s: %w", path, err)
	}
	return in, nil
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
		Routes:    d.desired.Routes, Failovers: d.failovers, Writes: d.ap.Writes, Applied: d.applied, LastError: d.lastErr}
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
// established flows keep going); remove=true also deletes the devices.
func (d *Daemon) Close(remove bool) error {
	var errs []error
	if d.dp != nil {
		errs = append(errs, d.dp.Close())
	}
	d.mu.Lock()
	devs := []*wgdev.Device{d.wgs[0], d.wgs[1], d.rot.drain}
	d.mu.Unlock()
	for _, w := range devs {
		if w != nil {
			errs = append(errs, w.Close(remove))
		}
	}
	if remove {
		for _, n := range []string{d.opt.Devices.VXLAN, d.opt.Devices.VXLANWG} {
			if l, err := netlink.LinkByName(n); err == nil {
				errs = append(errs, netlink.LinkDel(l))
			}
		}
	}
	return errors.Join(errs...)
}

func (d *Daemon) serveDebug(ctx context.Context) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: d})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// POST /rotate starts a key rotation (yonder-net-node rotate). The debug address is loopback by default:
	// only the node itself can ask.
	mux.HandleFunc("/rotate", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		if err := d.Rotate(); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrRotating) {
				code = http.StatusConflict
			}
			http.Error(w, err.Error(), code)
			return
		}
		_, _ = fmt.Fprintln(w, "rotation started")
	})
	mux.HandleFunc("/debug", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.Status())
	})
	ln, err := net.Listen("tcp", d.opt.DebugAddr)
	if err != nil {
		d.opt.Log.Error("Serving debug endpoint", "err", err)
		return
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	_ = srv.Serve(ln)
}

type collector struct{ d *Daemon }

var (
	mHandshake = prometheus.NewDesc("yonder_net_peer_handshake_age_seconds", "Seconds since the last WireGuard handshake with a peer (-1: never).", []string{"peer"}, nil)
	mRx        = prometheus.NewDesc("yonder_net_peer_rx_bytes_total", "Bytes received from a WireGuard peer.", []string{"peer"}, nil)
	mTx        = prometheus.NewDesc("yonder_net_peer_tx_bytes_total", "Bytes sent to a WireGuard peer.", []string{"peer"}, nil)
	mRTT       = prometheus.NewDesc("yonder_net_probe_rtt_seconds", "Last health probe round trip.", []string{"peer"}, nil)
	mLoss      = prometheus.NewDesc("yonder_net_probe_lost_total", "Probes sent without an answer.", []string{"peer"}, nil)
	mUp        = prometheus.NewDesc("yonder_net_probe_up", "1 when the peer answers its probes.", []string{"peer"}, nil)
	mFailovers = prometheus.NewDesc("yonder_net_failovers_total", "Peers taken out of gateway groups by the probes.", nil, nil)
	mMap       = prometheus.NewDesc("yonder_net_ebpf_map_entries", "Entries in the eBPF maps.", []string{"map"}, nil)
	mWrites    = prometheus.NewDesc("yonder_net_kernel_writes_total", "Kernel writes made by diff reconciliation.", []string{"kind"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mHandshake, mRx, mTx, mRTT, mLoss, mUp, mFailovers, mMap, mWrites} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.Status()
	for _, p := range st.WireGuard.Peers {
		ch <- prometheus.MustNewConstMetric(mHandshake, prometheus.GaugeValue, p.HandshakeAge, p.PublicKey)
		ch <- prometheus.MustNewConstMetric(mRx, prometheus.CounterValue, float64(p.RxBytes), p.PublicKey)
		ch <- prometheus.MustNewConstMetric(mTx, prometheus.CounterValue, float64(p.TxBytes), p.PublicKey)
	}
	for k, s := range st.Probes {
		ch <- prometheus.MustNewConstMetric(mRTT, prometheus.GaugeValue, s.LastRTT.Seconds(), k)
		lost := float64(0)
		if s.Sent > s.Received {
			lost = float64(s.Sent - s.Received)
		}
		ch <- prometheus.MustNewConstMetric(mLoss, prometheus.CounterValue, lost, k)
		up := 0.0
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(mUp, prometheus.GaugeValue, up, k)
	}
	ch <- prometheus.MustNewConstMetric(mFailovers, prometheus.CounterValue, float64(st.Failovers))
	ch <- prometheus.MustNewConstMetric(mMap, prometheus.GaugeValue, float64(st.MapPrefixes), "prefixes")
	ch <- prometheus.MustNewConstMetric(mMap, prometheus.GaugeValue, float64(st.MapGroups), "groups")
	for k, v := range map[string]int{"links": st.Writes.Links, "fdb": st.Writes.FDB, "neigh": st.Writes.Neigh, "routes": st.Writes.Routes, "peers": st.Writes.Peers, "maps": st.Writes.Maps} {
		ch <- prometheus.MustNewConstMetric(mWrites, prometheus.CounterValue, float64(v), k)
	}
}
