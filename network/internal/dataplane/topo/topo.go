// Package topo builds test topologies of network namespaces: a fabric namespace holding underlay bridges
// ("networks"), node namespaces with legs on those networks, and pod namespaces behind a node's bridge. Every
// name derives from a per-test prefix and everything is removed in cleanup, so tests can run concurrently.
// Traffic stays inside the namespaces a test creates.
package topo

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Lab is one test's set of namespaces.
type Lab struct {
	T      testing.TB
	Prefix string
	Fabric string // namespace holding the underlay bridges
	n      int
}

// New creates a lab with a fresh random prefix ("y" + 5 hex digits) and its fabric namespace.
func New(t testing.TB) *Lab {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	l := &Lab{T: t, Prefix: "y" + hex.EncodeToString(b)[:5]}
	l.Fabric = l.AddNS("fab")
	l.MustIP(l.Fabric, "link", "set", "lo", "up")
	return l
}

// AddNS creates the namespace <prefix>-<name> and removes it (and every process still inside) in cleanup.
func (l *Lab) AddNS(name string) string {
	l.T.Helper()
	ns := l.Prefix + "-" + name
	l.Must("ip", "netns", "add", ns)
	l.T.Cleanup(func() {
		// Kill whatever still runs in the namespace (processes this test started there).
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				if p == fmt.Sprint(os.Getpid()) {
					continue // a thread of this test process entered the namespace (RunIn)
				}
				_ = exec.Command("kill", "-9", p).Run()
			}
		}
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	l.MustIP(ns, "link", "set", "lo", "up")
	return ns
}

// Network creates a bridge in the fabric namespace.
func (l *Lab) Network(name string) string {
	l.T.Helper()
	l.MustIP(l.Fabric, "link", "add", name, "type", "bridge")
	l.MustIP(l.Fabric, "link", "set", name, "up")
	return name
}

// Attach connects namespace ns to the fabric bridge br with an interface named ifname holding addr (CIDR).
func (l *Lab) Attach(ns, ifname, br, addr string, mtu int) {
	l.T.Helper()
	l.n++
	outer := fmt.Sprintf("v%d%s", l.n, br)
	if len(outer) > 15 {
		outer = outer[:15]
	}
	l.MustIP(l.Fabric, "link", "add", outer, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", "tmp"+fmt.Sprint(l.n), "mtu", fmt.Sprint(mtu))
	l.MustIP(l.Fabric, "link", "set", "tmp"+fmt.Sprint(l.n), "netns", ns)
	l.MustIP(ns, "link", "set", "tmp"+fmt.Sprint(l.n), "name", ifname)
	l.MustIP(l.Fabric, "link", "set", outer, "master", br, "up")
	l.MustIP(ns, "addr", "add", addr, "dev", ifname)
	l.MustIP(ns, "link", "set", ifname, "up")
}

// Pod creates a pod namespace behind node namespace node: a veth into the node's bridge (created on first use
// with the pod CIDR's first address) and addr inside the pod with a default route via the bridge.
func (l *Lab) Pod(node, bridge, name string, podCIDR netip.Prefix, addr netip.Addr) string {
	l.T.Helper()
	pod := l.AddNS(name)
	gw := podCIDR.Addr().Next()
	if err := l.IP(node, "link", "show", bridge); err != nil {
		l.MustIP(node, "link", "add", bridge, "type", "bridge")
		l.MustIP(node, "addr", "add", fmt.Sprintf("%s/%d", gw, podCIDR.Bits()), "dev", bridge)
		l.MustIP(node, "link", "set", bridge, "up")
	}
	l.n++
	hostSide := fmt.Sprintf("p%d", l.n)
	l.MustIP(node, "link", "add", hostSide, "type", "veth", "peer", "name", "eth0", "netns", pod)
	l.MustIP(node, "link", "set", hostSide, "master", bridge, "up")
	l.MustIP(pod, "addr", "add", fmt.Sprintf("%s/%d", addr, podCIDR.Bits()), "dev", "eth0")
	l.MustIP(pod, "link", "set", "eth0", "up")
	l.MustIP(pod, "route", "add", "default", "via", gw.String())
	return pod
}

// IP runs `ip -n ns args…`.
func (l *Lab) IP(ns string, args ...string) error {
	_, err := run("ip", append([]string{"-n", ns}, args...)...)
	return err
}

// MustIP is IP failing the test on error.
func (l *Lab) MustIP(ns string, args ...string) {
	l.T.Helper()
	if err := l.IP(ns, args...); err != nil {
		l.T.Fatal(err)
	}
}

// Must runs a command and fails the test on error.
func (l *Lab) Must(name string, args ...string) string {
	l.T.Helper()
	out, err := run(name, args...)
	if err != nil {
		l.T.Fatal(err)
	}
	return out
}

// In returns a command that runs inside namespace ns (nsenter, which does not remount /sys like ip netns exec).
func In(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, name}, args...)...)
}

// Exec runs a command inside ns and returns its combined output.
func (l *Lab) Exec(ns string, name string, args ...string) (string, error) {
	var b bytes.Buffer
	c := In(ns, name, args...)
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	if err != nil {
		return b.String(), fmt.Errorf("failed to run %s %v in %s: %w: %s", name, args, ns, err, b.String())
	}
	return b.String(), nil
}

// Sysctl writes a sysctl inside ns.
func (l *Lab) Sysctl(ns, key, value string) {
	l.T.Helper()
	if _, err := l.Exec(ns, "sysctl", "-qw", key+"="+value); err != nil {
		l.T.Fatal(err)
	}
}

func run(name string, args ...string) (string, error) {
	var b bytes.Buffer
	c := exec.Command(name, args...)
	c.Stdout, c.Stderr = &b, &b
	c.Env = os.Environ()
	if err := c.Run(); err != nil {
		return b.String(), fmt.Errorf("failed to run %s %s: %w: %s", name, strings.Join(args, " "), err, b.String())
	}
	return b.String(), nil
}
