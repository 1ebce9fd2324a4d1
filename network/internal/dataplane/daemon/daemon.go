// Package daemon is yonder-net-node: it owns the node's key, devices, routes, eBPF program and probes, reads
// the node's view of the route plan and applies it with diffs, and publishes what peers need to know about it
// (key, endpoints, reachability).
//
// Its loop follows Felix's dataplane loop: events (a new input, a probe verdict, a key rotation step) mark
// the dataplane dirty; a dirty dataplane is applied; a failed apply is retried with exponential backoff
// (retryFloor doubling to retryCeiling) without waiting for another event; and every ResyncInterval the whole
// state is applied again, which repairs what someone else changed in the kernel (each phase is a diff, so
// an intact dataplane costs no writes).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

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

// Retry and resync timing.
const (
	// DefaultResyncInterval is how often the whole dataplane is applied again without any event.
	DefaultResyncInterval = time.Minute
	retryFloor            = 200 * time.Millisecond
	retryCeiling          = 30 * time.Second
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
	// ResyncInterval is how often the dataplane is applied again without an event (DefaultResyncInterval
	// when 0).
	ResyncInterval time.Duration
	Log            *slog.Logger
}

// Daemon is a running yonder-net-node.
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

	input         *desired.Input
	desired       desired.State
	down          map[string]bool
	failovers     uint64
	applied       int64
	applyFailures uint64
	lastErr       string
	kick          chan struct{}
	// reach is the published reachability verdict (nil: none yet); checkers the peers asked for it.
	reach    *netv1.NodeReachability
	checkers []netip.AddrPort
	// redialed is when the WireGuard session with a peer this node dials from behind NAT was last
	// forgotten because its probes failed (hop key → time).
	redialed map[string]time.Time

	// The loop's own state (only its goroutine touches it).
	dirty      bool
	backoff    time.Duration
	retryAt    time.Time
	nextResync time.Time
	inputMod   time.Time
	// transit is the ifindex of each VXLAN device the program is attached to (by name); transitApplied is
	// the applied count it was last brought up to date at.
	transit        map[string]int
	transitApplied int64
}

// New prepares the node: sysctls, key, WireGuard device, eBPF program. It does not need a plan yet.
func New(opt Options) (*Daemon, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	d := &Daemon{opt: opt, down: map[string]bool{}, redialed: map[string]time.Time{}, kick: make(chan struct{}, 1)}
	if err := kernel.Setup(); err != nil {
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
	if d.reach, err = loadReachability(opt.StateDir); err != nil {
		return nil, err
	}
	if d.dp, err = bpf.Load(); err != nil {
		return nil, err
	}
	d.ap = &kernel.Applier{Dev: opt.Devices, BPF: d.dp, Log: opt.Log}
	opt.Log.Info("Dataplane ready", "node", opt.Node, "wireguard", d.wgs[d.slots.Current].Kind, "slot", d.slots.Current,
		"kernelTunnels", d.tunnels, "publicKey", d.keys[d.slots.Current].PublicKey().String())
	return d, nil
}

// Run applies the plan whenever the input or a probe changes, retries a failed apply with backoff and
// resyncs periodically, until ctx ends.
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
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	d.nextResync = time.Now().Add(d.resyncInterval())
	for {
		d.step(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.kick:
			d.dirty = true
		}
	}
}

// step is one turn of the loop: pick up a new input, apply when something changed or a retry or resync is
// due, attach the eBPF program once a plan is applied, advance a key rotation, publish a new reachability.
func (d *Daemon) step(now time.Time) {
	if d.readInput() {
		d.dirty = true
	}
	select {
	case <-d.kick:
		d.dirty = true
	default:
	}
	if d.redialDue(now) || d.ap.RetireDue(now) {
		d.dirty = true
	}
	if !now.Before(d.nextResync) {
		d.dirty, d.nextResync = true, now.Add(d.resyncInterval())
	}
	if d.dirty && !now.Before(d.retryAt) {
		d.apply(now)
	}
	if d.attach == "" && d.applied > 0 {
		d.tryAttach()
	} else if d.attach != "" && d.transitApplied != d.applied {
		d.attachTransit()
	}
	d.rotationStep()
	d.publishReachability()
}

// apply reconciles; a failure schedules a retry with exponential backoff.
func (d *Daemon) apply(now time.Time) {
	if err := d.reconcile(); err != nil {
		d.backoff = min(max(2*d.backoff, retryFloor), retryCeiling)
		d.retryAt = now.Add(d.backoff)
		d.opt.Log.Info("Retrying the plan later", "in", d.backoff)
		return
	}
	d.dirty, d.backoff, d.retryAt = false, 0, time.Time{}
}

func (d *Daemon) resyncInterval() time.Duration {
	if d.opt.ResyncInterval > 0 {
		return d.opt.ResyncInterval
	}
	return DefaultResyncInterval
}

// readInput re-reads the input file when it changed and reports whether it did.
func (d *Daemon) readInput() bool {
	st, err := os.Stat(d.opt.InputFile)
	if err != nil || st.ModTime().Equal(d.inputMod) {
		return false
	}
	in, err := readInput(d.opt.InputFile)
	if err != nil {
		d.opt.Log.Error("Reading input", "err", err)
		return false
	}
	d.inputMod = st.ModTime()
	d.mu.Lock()
	d.input = in
	d.mu.Unlock()
	return true
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
	d.attachTransit()
}

// attachTransit attaches the program to the VXLAN devices, so a gateway's transit traffic takes the same
// per-flow choice. The apply creates a VXLAN device only while the plan uses it and removes it after, so
// this runs after every successful apply: a new device gets the program, a removed one's attachment is
// released, and one recreated under the same name (a new ifindex) is attached again.
func (d *Daemon) attachTransit() {
	d.transitApplied = d.applied
	if d.transit == nil {
		d.transit = map[string]int{}
	}
	for _, n := range []string{d.opt.Devices.VXLAN, d.opt.Devices.VXLANWG} {
		idx := 0
		if l, err := netlink.LinkByName(n); err == nil {
			idx = l.Attrs().Index
		}
		old, ok := d.transit[n]
		if ok && old == idx {
			continue
		}
		if ok {
			if err := d.dp.Detach(old); err != nil {
				d.opt.Log.Error("Detaching eBPF program", "device", n, "err", err)
			}
			delete(d.transit, n)
		}
		if idx == 0 {
			continue
		}
		if _, err := d.dp.Attach(idx, d.attach); err != nil {
			d.opt.Log.Error("Attaching eBPF program", "device", n, "err", err)
			continue
		}
		d.transit[n] = idx
		d.opt.Log.Info("Attached eBPF program", "device", n, "mode", d.attach)
	}
}

func (d *Daemon) onProbe(key string, up bool) {
	d.mu.Lock()
	if up {
		delete(d.down, key)
		delete(d.redialed, key)
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
		errs = append(errs, kernel.RemoveVXLANFilter())
	}
	return errors.Join(errs...)
}
