// Package wgdev creates a WireGuard device — the kernel's when the kernel has the module, else an embedded
// wireguard-go device serving the UAPI socket — and configures both through the same wgctrl code, with
// diff-based peer reconciliation: a peer whose configuration is unchanged is never rewritten.
package wgdev

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Kind says which implementation backs a device.
type Kind string

const (
	// KindKernel is the kernel's WireGuard module, driven over generic netlink.
	KindKernel Kind = "kernel"
	// KindUserspace is wireguard-go embedded in this process, driven over its UAPI socket.
	KindUserspace Kind = "userspace"
)

// Device is one WireGuard interface this process manages.
type Device struct {
	Name string
	Kind Kind

	client *wgctrl.Client
	// userspace only
	dev      *device.Device
	uapi     net.Listener
	closeOne sync.Once
}

// Peer is the desired configuration of one peer.
type Peer struct {
	PublicKey  wgtypes.Key
	Endpoint   *net.UDPAddr
	AllowedIPs []net.IPNet
	// Keepalive keeps NAT mappings open; 0 disables it.
	Keepalive time.Duration
}

// Open creates (or adopts, for a kernel device left by a previous run) the device name. kernel=false forces the
// userspace implementation; otherwise the kernel module is tried first and its absence detected at run time.
func Open(name string, mtu int, tryKernel bool, log *slog.Logger) (*Device, error) {
	client, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("failed to open wgctrl: %w", err)
	}
	if tryKernel {
		d, err := openKernel(name, mtu, client)
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, errNoKernel) {
			_ = client.Close()
			return nil, err
		}
		log.Info("Kernel has no WireGuard module, using embedded wireguard-go", "device", name)
	}
	d, err := openUserspace(name, mtu, client, log)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return d, nil
}

var errNoKernel = errors.New("kernel WireGuard not available")

// KernelAvailable reports whether the running kernel can create WireGuard links (probed with a scratch link).
func KernelAvailable(probeName string) bool {
	la := netlink.NewLinkAttrs()
	la.Name = probeName
	err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la})
	if err != nil {
		return false
	}
	if l, err := netlink.LinkByName(probeName); err == nil {
		_ = netlink.LinkDel(l)
	}
	return true
}

func openKernel(name string, mtu int, client *wgctrl.Client) (*Device, error) {
	l, err := netlink.LinkByName(name)
	if err == nil && l.Type() != "wireguard" {
		return nil, fmt.Errorf("failed to adopt %s: it is a %s link, not wireguard", name, l.Type())
	}
	if err != nil {
		la := netlink.NewLinkAttrs()
		la.Name = name
		la.MTU = mtu
		if err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la}); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL) {
				return nil, errNoKernel
			}
			return nil, fmt.Errorf("failed to create wireguard link %s: %w", name, err)
		}
		if l, err = netlink.LinkByName(name); err != nil {
			return nil, fmt.Errorf("failed to find wireguard link %s: %w", name, err)
		}
	}
	if l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return nil, fmt.Errorf("failed to set MTU of %s: %w", name, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("failed to set %s up: %w", name, err)
	}
	return &Device{Name: name, Kind: KindKernel, client: client}, nil
}

func openUserspace(name string, mtu int, client *wgctrl.Client, log *slog.Logger) (*Device, error) {
	// A TUN left by a crashed run cannot be re-attached to: remove it.
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
	t, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("failed to create TUN %s: %w", name, err)
	}
	lvl := device.LogLevelError
	logger := &device.Logger{
		Verbosef: func(string, ...any) {},
		Errorf:   func(f string, a ...any) { log.Error(fmt.Sprintf(f, a...), "device", name) },
	}
	_ = lvl
	dev := device.NewDevice(t, conn.NewDefaultBind(), logger)
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("failed to open UAPI socket for %s: %w", name, err)
	}
	ln, err := ipc.UAPIListen(name, f)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("failed to listen on UAPI socket for %s: %w", name, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	if err := dev.Up(); err != nil {
		_ = ln.Close()
		dev.Close()
		return nil, fmt.Errorf("failed to bring up %s: %w", name, err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		_ = ln.Close()
		dev.Close()
		return nil, fmt.Errorf("failed to find TUN %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		_ = ln.Close()
		dev.Close()
		return nil, fmt.Errorf("failed to set %s up: %w", name, err)
	}
	return &Device{Name: name, Kind: KindUserspace, client: client, dev: dev, uapi: ln}, nil
}

// SetIdentity sets the private key and listen port when they differ from the device's.
func (d *Device) SetIdentity(key wgtypes.Key, port int) (bool, error) {
	cur, err := d.client.Device(d.Name)
	if err != nil {
		return false, fmt.Errorf("failed to read device %s: %w", d.Name, err)
	}
	if cur.PrivateKey == key && cur.ListenPort == port {
		return false, nil
	}
	if err := d.client.ConfigureDevice(d.Name, wgtypes.Config{PrivateKey: &key, ListenPort: &port}); err != nil {
		return false, fmt.Errorf("failed to set key and port of %s: %w", d.Name, err)
	}
	return true, nil
}

// State returns the device as wgctrl reads it.
func (d *Device) State() (*wgtypes.Device, error) {
	cur, err := d.client.Device(d.Name)
	if err != nil {
		return nil, fmt.Errorf("failed to read device %s: %w", d.Name, err)
	}
	return cur, nil
}

// Changes is what ReconcilePeers did.
type Changes struct {
	Added, Updated, Removed []wgtypes.Key
}

// Empty reports whether nothing was written.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Updated)+len(c.Removed) == 0 }

// ReconcilePeers makes the device's peers equal to desired, writing only peers that are new, differ, or are gone.
func (d *Device) ReconcilePeers(desired []Peer) (Changes, error) {
	return d.reconcilePeers(desired, true)
}

// UpsertPeers adds and updates the peers of desired like ReconcilePeers but removes none, so a caller can
// point traffic away from a peer before removing it.
func (d *Device) UpsertPeers(desired []Peer) (Changes, error) {
	return d.reconcilePeers(desired, false)
}

// RemovePeers removes the given peers (absent ones are ignored). Re-adding one afterwards starts from no
// session, so the next packet to it starts a handshake at once: what a dialling end behind NAT needs when
// the peer it dials lost its session (a restarted userspace device), which that peer cannot re-establish
// because it cannot dial back.
func (d *Device) RemovePeers(keys []wgtypes.Key) error {
	if len(keys) == 0 {
		return nil
	}
	cfgs := make([]wgtypes.PeerConfig, 0, len(keys))
	for _, k := range keys {
		cfgs = append(cfgs, wgtypes.PeerConfig{PublicKey: k, Remove: true})
	}
	if err := d.client.ConfigureDevice(d.Name, wgtypes.Config{Peers: cfgs}); err != nil {
		return fmt.Errorf("failed to remove peers of %s: %w", d.Name, err)
	}
	return nil
}

func (d *Device) reconcilePeers(desired []Peer, remove bool) (Changes, error) {
	cur, err := d.State()
	if err != nil {
		return Changes{}, err
	}
	have := map[wgtypes.Key]wgtypes.Peer{}
	for _, p := range cur.Peers {
		have[p.PublicKey] = p
	}
	var ch Changes
	var cfgs []wgtypes.PeerConfig
	want := map[wgtypes.Key]bool{}
	for _, p := range desired {
		want[p.PublicKey] = true
		h, ok := have[p.PublicKey]
		if ok && samePeer(h, p) {
			continue
		}
		cfgs = append(cfgs, peerConfig(h, ok, p))
		if ok {
			ch.Updated = append(ch.Updated, p.PublicKey)
		} else {
			ch.Added = append(ch.Added, p.PublicKey)
		}
	}
	for k := range have {
		if remove && !want[k] {
			cfgs = append(cfgs, wgtypes.PeerConfig{PublicKey: k, Remove: true})
			ch.Removed = append(ch.Removed, k)
		}
	}
	if len(cfgs) == 0 {
		return ch, nil
	}
	if err := d.client.ConfigureDevice(d.Name, wgtypes.Config{Peers: cfgs}); err != nil {
		return Changes{}, fmt.Errorf("failed to configure peers of %s: %w", d.Name, err)
	}
	return ch, nil
}

func samePeer(h wgtypes.Peer, p Peer) bool {
	if h.PersistentKeepaliveInterval != p.Keepalive {
		return false
	}
	if p.Endpoint != nil && (h.Endpoint == nil || !h.Endpoint.IP.Equal(p.Endpoint.IP) || h.Endpoint.Port != p.Endpoint.Port) {
		return false
	}
	return slices.Equal(ipnetStrings(h.AllowedIPs), ipnetStrings(p.AllowedIPs))
}

// peerConfig is the write that makes the peer h (exists false: none yet) equal to p.
func peerConfig(h wgtypes.Peer, exists bool, p Peer) wgtypes.PeerConfig {
	ka := p.Keepalive
	cfg := wgtypes.PeerConfig{
		PublicKey: p.PublicKey, Endpoint: p.Endpoint, ReplaceAllowedIPs: true,
		AllowedIPs: p.AllowedIPs, PersistentKeepaliveInterval: &ka,
	}
	if add, ok := addedAllowedIPs(h, p, exists); ok {
		// Only additions (a peer's switched key gaining its Site's L3 prefixes): add them without
		// replacing. Replacing first removes every allowed IP of the peer and then inserts them again,
		// one UAPI line at a time in wireguard-go, so packets from or to the peer's existing addresses
		// were dropped in between (TestWireGuardL3 lost 3 datagrams under CPU load). An added prefix
		// that another peer holds moves to this one in a single insert.
		cfg.ReplaceAllowedIPs, cfg.AllowedIPs = false, add
	}
	return cfg
}

// addedAllowedIPs returns the allowed IPs of p that the existing peer h lacks, and true when h's allowed IPs
// are all still wanted (so the change needs no removal). exists is false for a new peer.
func addedAllowedIPs(h wgtypes.Peer, p Peer, exists bool) ([]net.IPNet, bool) {
	if !exists {
		return nil, false
	}
	want := map[string]bool{}
	for _, s := range ipnetStrings(p.AllowedIPs) {
		want[s] = true
	}
	have := map[string]bool{}
	for _, s := range ipnetStrings(h.AllowedIPs) {
		if !want[s] {
			return nil, false
		}
		have[s] = true
	}
	var add []net.IPNet
	for _, n := range p.AllowedIPs {
		if !have[n.String()] {
			add = append(add, n)
			have[n.String()] = true
		}
	}
	return add, true
}

func ipnetStrings(ns []net.IPNet) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.String())
	}
	sort.Strings(out)
	return out
}

// Close removes the device (userspace: stops wireguard-go and its UAPI socket; kernel: deletes the link when
// remove is true — a daemon restart keeps a kernel device so established flows survive).
func (d *Device) Close(remove bool) error {
	var err error
	d.closeOne.Do(func() {
		if d.uapi != nil {
			_ = d.uapi.Close()
		}
		if d.dev != nil {
			d.dev.Close()
		}
		if d.Kind == KindKernel && remove {
			if l, lerr := netlink.LinkByName(d.Name); lerr == nil {
				err = netlink.LinkDel(l)
			}
		}
		_ = os.Remove(fmt.Sprintf("/var/run/wireguard/%s.sock", d.Name))
		err = errors.Join(err, d.client.Close())
	})
	return err
}
