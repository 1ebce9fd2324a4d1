package daemon

import (
	"net/netip"
	"sort"
	"time"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/kernel"
	"github.com/yonder-dev/yonder/network/internal/dataplane/probe"
)

// maxCheckers is how many peers at other Sites a node asks to check its reachability (each check is one
// small datagram per round; several, because a peer listed as dialable may not be reachable from here).
const maxCheckers = 8

// reconcile computes the desired dataplane from the current input and the probes' view, applies it and
// the CNI config, and points the probes and reachability checks at what it applied. A failure is
// returned (and kept for the status); the loop retries it with backoff.
func (d *Daemon) reconcile() error {
	in, down, own, feat := d.snapshot()
	if in == nil {
		return nil
	}
	st, err := desired.ComputeWith(*in, down, feat)
	if err == nil {
		err = d.ap.Redial(own, d.redials(st, down, time.Now()))
	}
	if err == nil {
		err = d.ap.Apply(st, own)
	}
	if err == nil && d.opt.CNIConfDir != "" {
		err = WriteCNIConfig(d.opt.CNIConfDir, d.opt.Devices.PodBridge, in.PodCIDRs, st.VXLANMTU)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.lastErr = err.Error()
		d.applyFailures++
		d.opt.Log.Error("Applying plan", "err", err)
		return err
	}
	d.lastErr, d.desired = "", st
	d.applied++
	d.monitor(*in, st)
	return nil
}

// redialEvery is how often the session with a dialled peer whose probes fail is forgotten again.
const redialEvery = 2 * time.Second

// redials are the public keys of the reachable peers this node dials from behind NAT whose probes fail and
// that were not redialed in the last redialEvery: their sessions are forgotten so the next packet starts a
// handshake. Without that, a peer that lost its session (its userspace device restarted) would wait for
// WireGuard's own retry (~15 s), and it cannot dial back.
func (d *Daemon) redials(st desired.State, down map[string]bool, now time.Time) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var keys []string
	for k, h := range st.Hops {
		if !down[k] || !h.Initiate || h.Via != desired.ViaWireGuard || now.Sub(d.redialed[k]) < redialEvery {
			continue
		}
		d.redialed[k] = now
		keys = append(keys, h.PublicKey)
		d.opt.Log.Info("Redialing a peer that stopped answering", "peer", k)
	}
	return keys
}

// redialDue reports whether a failing dialled peer is due for another redial.
func (d *Daemon) redialDue(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.down {
		if h, ok := d.desired.Hops[k]; ok && h.Initiate && h.Via == desired.ViaWireGuard && now.Sub(d.redialed[k]) >= redialEvery {
			return true
		}
	}
	return false
}

// snapshot copies what one reconcile reads, under the lock.
func (d *Daemon) snapshot() (*desired.Input, map[string]bool, kernel.OwnWireGuard, desired.Features) {
	d.mu.Lock()
	defer d.mu.Unlock()
	down := map[string]bool{}
	for k := range d.down {
		down[k] = true
	}
	feat := desired.Features{WireGuardL3: d.opt.WireGuardL3, Rotating: d.slots.Rotating() || d.rot.drain != nil}
	return d.input, down, d.ownWireGuard(), feat
}

// monitor sets the probes' timing, targets and reachability checkers for the applied state. d.mu must be
// held.
func (d *Daemon) monitor(in desired.Input, st desired.State) {
	iv, th := time.Duration(in.Plan.HealthProbe.IntervalMilliseconds)*time.Millisecond, int(in.Plan.HealthProbe.FailureThreshold)
	if iv <= 0 {
		iv = 200 * time.Millisecond
	}
	if th <= 0 {
		th = 3
	}
	d.prober.SetTiming(iv, th)
	d.prober.SetTargets(d.probeTargets(in, st))
	d.checkers = checkers(in)
	d.prober.SetCheckers(d.checkers)
}

// probeTargets are the next hops the probes watch: members of multi-member groups (gateways, which
// traffic can move away from; computed without the probes' verdicts, so members down stay watched and
// come back), and reachable peers this node dials from behind NAT (a probe every interval keeps the NAT's
// mapping, and re-creates it at once after the NAT forgot it). Peers that left the plan are no longer down.
// Group members are fast targets: probed several times per interval, so a failed gateway leaves the
// groups in a fraction of the configured detection time (probe.Target.Fast). d.mu must be held.
func (d *Daemon) probeTargets(in desired.Input, st desired.State) []probe.Target {
	all, err := desired.Compute(in, nil)
	if err != nil {
		all = st
	}
	for k := range d.down {
		if _, ok := all.Hops[k]; !ok {
			delete(d.down, k)
		}
	}
	seen := map[string]bool{}
	var targets []probe.Target
	add := func(k string, h desired.NextHop, fast bool) {
		if seen[k] {
			return
		}
		seen[k] = true
		addr := h.Underlay
		if h.Via == desired.ViaWireGuard {
			addr = h.WGAddr
		}
		targets = append(targets, probe.Target{Key: k, Addr: netip.AddrPortFrom(addr, uint16(h.ProbePort)), Fast: fast}) //nolint:gosec // ports fit in 16 bits
	}
	for _, r := range all.Routes {
		if len(r.Members) < 2 {
			continue
		}
		for _, m := range r.Members {
			add(m, all.Hops[m], true)
		}
	}
	for k := range d.down {
		add(k, all.Hops[k], false)
	}
	for k, h := range st.Hops {
		if h.Initiate && h.Via == desired.ViaWireGuard {
			add(k, h, false)
		}
	}
	return targets
}

// checkers are the probe addresses of up to maxCheckers peers at other Sites that can be dialled (an
// External IPv4 endpoint, not behind NAT), by node name.
func checkers(in desired.Input) []netip.AddrPort {
	byNode := map[string]netip.AddrPort{}
	for _, s := range in.Slices {
		if s.Site == in.Site {
			continue
		}
		for _, p := range s.Peers {
			if p.BehindNAT {
				continue
			}
			if ap, ok := probeAddr(p, in.Plan.HealthProbe.Port); ok {
				byNode[p.Node] = ap
			}
		}
	}
	names := make([]string, 0, len(byNode))
	for n := range byNode {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []netip.AddrPort
	for _, n := range names[:min(len(names), maxCheckers)] {
		out = append(out, byNode[n])
	}
	return out
}

func probeAddr(p netv1.Peer, planPort int32) (netip.AddrPort, bool) {
	port := p.Ports.Probe
	if port == 0 {
		port = planPort
	}
	if port == 0 {
		port = desired.DefaultProbePort
	}
	for _, e := range p.Endpoints {
		if a, err := netip.ParseAddr(e.Address); err == nil && a.Is4() && e.Type == netv1.EndpointExternal {
			return netip.AddrPortFrom(a, uint16(port)), true
		}
	}
	return netip.AddrPort{}, false
}
