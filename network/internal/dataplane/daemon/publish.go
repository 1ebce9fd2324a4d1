package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// Publication is what the node publishes in its NodeNetwork.
func (d *Daemon) Publication() (netv1.NodeNetworkSpec, error) {
	d.mu.Lock()
	cur, slots := d.keys[d.slots.Current], d.slots
	next := d.keys[max(slots.Next, 0)]
	reach := d.reach
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
	if reach != nil {
		r := *reach
		spec.Reachability = &r
		// Reachable where peers at other Sites see it from (a port-forwarding NAT, or an address the
		// node does not know it has): that is the address to dial.
		if ext == "" && r.Inbound == netv1.ReachabilityReachable && r.ObservedAddress != "" {
			ext = r.ObservedAddress
		}
	}
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

// reachabilityFile keeps the last reachability verdict across restarts, so a restarted daemon publishes it
// at once instead of nothing (which the controller would plan as reachable until the checks are done).
func reachabilityFile(stateDir string) string { return filepath.Join(stateDir, "reachability.json") }

func loadReachability(stateDir string) (*netv1.NodeReachability, error) {
	b, err := os.ReadFile(reachabilityFile(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read the reachability state: %w", err)
	}
	r := &netv1.NodeReachability{}
	if err := json.Unmarshal(b, r); err != nil {
		// A verdict is re-detected within seconds: a damaged file is not worth refusing to start for.
		return nil, nil //nolint:nilerr // see above
	}
	return r, nil
}

func storeReachability(stateDir string, r netv1.NodeReachability) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("failed to encode the reachability state: %w", err)
	}
	tmp := reachabilityFile(stateDir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("failed to write the reachability state: %w", err)
	}
	if err := os.Rename(tmp, reachabilityFile(stateDir)); err != nil {
		return fmt.Errorf("failed to write the reachability state: %w", err)
	}
	return nil
}

// publishReachability publishes a new reachability verdict of the probes (and keeps it for restarts).
func (d *Daemon) publishReachability() {
	if d.prober == nil {
		return
	}
	v := d.prober.Reachability()
	if v.Inbound == "" {
		return
	}
	next := netv1.NodeReachability{Inbound: v.Inbound}
	if v.Observed.IsValid() {
		next.ObservedAddress = v.Observed.String()
	}
	d.mu.Lock()
	same := d.reach != nil && *d.reach == next
	if !same {
		d.reach = &next
	}
	d.mu.Unlock()
	if same {
		return
	}
	d.opt.Log.Info("Detected reachability", "inbound", next.Inbound, "observedAddress", next.ObservedAddress)
	if err := storeReachability(d.opt.StateDir, next); err != nil {
		d.opt.Log.Error("Storing reachability", "err", err)
	}
	if err := d.publish(); err != nil {
		d.opt.Log.Error("Publishing reachability", "err", err)
	}
}
