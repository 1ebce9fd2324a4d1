// Package sitetest builds multi-site topologies of namespace "nodes" running the real yonder-net-node binary,
// plays the controller's part (writes each node's view of the route plan from the nodes' published keys), and
// moves real packets between pod namespaces. Used by the dataplane tests and benchmarks.
package sitetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/test/gobuild"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds yonder-net-node once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "yonder-net-node-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "yonder-net-node")
		buildErr = gobuild.Build(context.Background(), binPath, gobuild.Options{}, "./network/cmd/yonder-net-node")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveBinary removes the binary Binary built (call it from TestMain after m.Run).
func RemoveBinary() {
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
}

// Node is one namespace node.
type Node struct {
	Name    string
	Site    string
	NS      string
	PodCIDR netip.Prefix
	Pod     string // pod namespace
	PodIP   netip.Addr
	LAN     netip.Addr // Internal endpoint
	WAN     netip.Addr // External endpoint (gateways)
	Gateway bool
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
	PubKey  string
	// Slot and NextKey are the node's published WireGuard slot and rotation key.
	Slot    int32
	NextKey string
}

// Sites is a two-site topology: site "a" (node a1 behind gateways ga1, ga2) and site "b" (node b2 behind
// gateway gb1). Only gateways have a leg on the WAN: a1 and b2 reach the other site only through them.
type Sites struct {
	T        testing.TB
	Lab      *topo.Lab
	Nodes    map[string]*Node
	Protocol netv1.Protocol // between the sites
	// Intra is the protocol inside each site (VXLAN unless set before the plans are written).
	Intra netv1.Protocol
	// ExtraArgs are added to every daemon's command line at its next Start.
	ExtraArgs []string
	bin       string
	inactive  map[string]bool // of the last WritePlans
}

// NewSites builds the namespaces and pods and starts a daemon on every node.
func NewSites(t testing.TB, proto netv1.Protocol) *Sites {
	t.Helper()
	return NewSitesWith(t, netv1.ProtocolVXLAN, proto)
}

// NewSitesWith is NewSites with a chosen intra-site protocol.
func NewSitesWith(t testing.TB, intra, proto netv1.Protocol) *Sites {
	t.Helper()
	s := Build(t, nil)
	s.Protocol, s.Intra = proto, intra
	s.WritePlans(nil)
	return s
}

// Build builds the namespaces, pods and daemons without writing any plan (a test driving the daemons through
// the API does that). podCIDRs overrides the nodes' pod CIDRs (name → CIDR).
func Build(t testing.TB, podCIDRs map[string]string) *Sites {
	t.Helper()
	s := &Sites{T: t, Lab: topo.New(t), Nodes: map[string]*Node{}, Protocol: netv1.ProtocolWireGuard, Intra: netv1.ProtocolVXLAN, bin: Binary(t)}
	l := s.Lab
	l.Network("lana")
	l.Network("lanb")
	l.Network("wan")
	add := func(name, site string, podCIDR string, lan, wan string, gw bool) {
		if c, ok := podCIDRs[name]; ok {
			podCIDR = c
		}
		n := &Node{Name: name, Site: site, NS: l.AddNS(name), PodCIDR: netip.MustParsePrefix(podCIDR), Gateway: gw, dir: t.TempDir()}
		n.LAN = netip.MustParseAddr(lan)
		l.Attach(n.NS, "eth0", "lan"+site, lan+"/24", 1500)
		if wan != "" {
			n.WAN = netip.MustParseAddr(wan)
			l.Attach(n.NS, "eth1", "wan", wan+"/24", 1500)
		}
		n.PodIP = n.PodCIDR.Addr().Next().Next()
		n.Pod = l.Pod(n.NS, "br0", name+"p", n.PodCIDR, n.PodIP)
		s.Nodes[name] = n
	}
	add("a1", "a", "10.10.1.0/24", "192.168.10.11", "", false)
	add("ga1", "a", "10.10.2.0/24", "192.168.10.21", "192.168.100.21", true)
	add("ga2", "a", "10.10.3.0/24", "192.168.10.22", "192.168.100.22", true)
	add("gb1", "b", "10.20.1.0/24", "192.168.20.31", "192.168.100.31", true)
	add("b2", "b", "10.20.2.0/24", "192.168.20.32", "", false)
	for _, n := range s.Nodes {
		s.Start(n)
	}
	for _, n := range s.Nodes {
		s.WaitPublished(n)
	}
	return s
}

// InputFile is where the node's daemon reads its view of the plan.
func (n *Node) InputFile() string { return filepath.Join(n.dir, "plan.yaml") }

// Publication returns what the node's daemon published.
func (n *Node) Publication() (netv1.NodeNetworkSpec, error) {
	var spec netv1.NodeNetworkSpec
	b, err := os.ReadFile(filepath.Join(n.dir, "nodenetwork.yaml"))
	if err != nil {
		return spec, fmt.Errorf("failed to read publication of %s: %w", n.Name, err)
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("failed to parse publication of %s: %w", n.Name, err)
	}
	return spec, nil
}

// Start starts (or restarts) the node's daemon.
func (s *Sites) Start(n *Node) {
	s.T.Helper()
	log, err := os.OpenFile(filepath.Join(n.dir, "daemon.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		s.T.Fatal(err)
	}
	args := []string{"--node", n.Name, "--state-dir", filepath.Join(n.dir, "state"),
		"--input", filepath.Join(n.dir, "plan.yaml"), "--publish", filepath.Join(n.dir, "nodenetwork.yaml"),
		"--wireguard-device", s.Lab.Prefix + n.Name, "--pod-bridge", "br0", "--underlay-device", "eth0", "--api=false"}
	if n.WAN.IsValid() {
		args = append(args, "--external-endpoint", n.WAN.String())
	}
	args = append(args, s.ExtraArgs...)
	n.cmd = topo.In(n.NS, s.bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	if err := n.cmd.Start(); err != nil {
		s.T.Fatal(err)
	}
	n.done = make(chan struct{})
	cmd, done := n.cmd, n.done
	go func() { _ = cmd.Wait(); _ = log.Close(); close(done) }()
	s.T.Cleanup(func() { s.Stop(n) })
}

// Stop stops the daemon (SIGTERM: devices stay, like a restart) and waits for it to exit.
func (s *Sites) Stop(n *Node) {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// Log returns the node daemon's log.
func (n *Node) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
	return string(b)
}

// WaitPublished waits for the node's NodeNetwork spec and records its public key.
func (s *Sites) WaitPublished(n *Node) {
	s.T.Helper()
	g := gomega.NewWithT(s.T)
	g.Eventually(func() (string, error) {
		b, err := os.ReadFile(filepath.Join(n.dir, "nodenetwork.yaml"))
		if err != nil {
			return "", err
		}
		var spec netv1.NodeNetworkSpec
		if err := yaml.Unmarshal(b, &spec); err != nil {
			return "", err
		}
		n.PubKey, n.Slot, n.NextKey = spec.PublicKey, spec.WireGuardSlot, spec.NextPublicKey
		return spec.PublicKey, nil
	}, 20*time.Second, 50*time.Millisecond).ShouldNot(gomega.BeEmpty(), func() string { return n.Log() })
}

// Republish re-reads every node's publication, as the controller would from the NodeNetworks, and rewrites
// the plans when a key, slot or rotation key changed. It reports whether it did.
func (s *Sites) Republish() bool {
	s.T.Helper()
	changed := false
	for _, n := range s.Nodes {
		spec, err := n.Publication()
		if err != nil || spec.PublicKey == "" {
			continue
		}
		if spec.PublicKey != n.PubKey || spec.WireGuardSlot != n.Slot || spec.NextPublicKey != n.NextKey {
			n.PubKey, n.Slot, n.NextKey = spec.PublicKey, spec.WireGuardSlot, spec.NextPublicKey
			changed = true
		}
	}
	if changed {
		s.WritePlans(s.inactive)
	}
	return changed
}

func (s *Sites) peer(n *Node) netv1.Peer {
	p := netv1.Peer{Node: n.Name, PodCIDRs: []string{n.PodCIDR.String()}, PublicKey: n.PubKey, WireGuardSlot: n.Slot, NextPublicKey: n.NextKey,
		Endpoints: []netv1.Endpoint{{Address: n.LAN.String(), Type: netv1.EndpointInternal}}}
	if n.WAN.IsValid() {
		p.Endpoints = append(p.Endpoints, netv1.Endpoint{Address: n.WAN.String(), Type: netv1.EndpointExternal})
	}
	if n.Gateway {
		p.Gateway = &netv1.PeerGateway{Pools: []string{n.Site + "-gw"}, Active: true}
	}
	return p
}

// WritePlans writes every node's input as the controller would publish it; inactive names gateways the API
// has marked inactive.
func (s *Sites) WritePlans(inactive map[string]bool) {
	s.T.Helper()
	s.inactive = inactive
	var slices []netv1.PeerSliceSpec
	gws := map[string][]string{}
	for _, site := range []string{"a", "b"} {
		gs := netv1.PeerSliceSpec{Site: site, Role: netv1.SliceRoleGateways}
		ns := netv1.PeerSliceSpec{Site: site, Role: netv1.SliceRoleNodes}
		for _, name := range []string{"a1", "ga1", "ga2", "gb1", "b2"} {
			n := s.Nodes[name]
			if n.Site != site {
				continue
			}
			p := s.peer(n)
			if n.Gateway {
				p.Gateway.Active = !inactive[name]
				gs.Peers = append(gs.Peers, p)
				if p.Gateway.Active {
					gws[site] = append(gws[site], name)
				}
			} else {
				ns.Peers = append(ns.Peers, p)
			}
		}
		slices = append(slices, gs, ns)
	}
	// The tunnel MTUs the controller would plan for a 1500-byte underlay.
	mtu := plan.DefaultMTU - plan.Overhead(s.Protocol)
	intraMTU := plan.DefaultMTU - plan.Overhead(s.Intra)
	for _, n := range s.Nodes {
		remote, pool := "b", "10.20.0.0/16"
		if n.Site == "b" {
			remote, pool = "a", "10.10.0.0/16"
		}
		in := desired.Input{Node: n.Name, Site: n.Site, PodCIDRs: []string{n.PodCIDR.String()}, Slices: slices,
			Plan: netv1.RoutePlanSpec{Site: n.Site, IntraSite: netv1.IntraSitePlan{Protocol: s.Intra, TunnelMTU: intraMTU},
				Links: []netv1.SiteLink{{Site: remote, Protocol: s.Protocol, Mode: netv1.LinkModeGateway, TunnelMTU: mtu,
					EndpointType: netv1.EndpointExternal, Prefixes: []string{pool}, LocalGateways: gws[n.Site],
					RemoteGateways: gws[remote], Up: len(gws[n.Site]) > 0 && len(gws[remote]) > 0}},
				HealthProbe: netv1.HealthProbeSpec{Port: 51822}}}
		b, err := yaml.Marshal(in)
		if err != nil {
			s.T.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.dir, "plan.yaml.tmp"), b, 0o600); err != nil {
			s.T.Fatal(err)
		}
		if err := os.Rename(filepath.Join(n.dir, "plan.yaml.tmp"), filepath.Join(n.dir, "plan.yaml")); err != nil {
			s.T.Fatal(err)
		}
	}
}

// Debug returns the node's state as `yonder-net-node debug` prints it.
func (s *Sites) Debug(n *Node) (daemon.Status, error) {
	var st daemon.Status
	out, err := s.Lab.Exec(n.NS, s.bin, "debug")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("failed to parse debug output: %w: %s", err, out)
	}
	return st, nil
}

// Listen opens a socket in ns (created on a thread inside it; usable from any goroutine afterwards).
func Listen(ns, network, addr string) (any, error) {
	var res any
	err := topo.RunIn(ns, func() error {
		var err error
		if strings.HasPrefix(network, "udp") {
			res, err = net.ListenPacket(network, addr)
		} else {
			res, err = net.Listen(network, addr)
		}
		return err
	})
	return res, err
}

// Dial connects from ns.
func Dial(ns, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := topo.RunIn(ns, func() error {
		var err error
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

// Echo serves TCP and UDP echo on port in the pod namespace until the test ends.
func Echo(t testing.TB, ns string, port int) {
	t.Helper()
	l, err := Listen(ns, "tcp4", fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatal(err)
	}
	ln := l.(net.Listener)
	p, err := Listen(ns, "udp4", fmt.Sprintf(":%d", port))
	if err != nil {
		t.Fatal(err)
	}
	pc := p.(net.PacketConn)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = ln.Close(); _ = pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				buf := make([]byte, 64<<10)
				for ctx.Err() == nil {
					n, err := r.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}
