package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	. "github.com/onsi/gomega"
	"github.com/vishvananda/netlink"

	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// testNetns creates a network namespace of the test's own and returns its path.
func testNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates a network namespace and needs root (see docs/development.md)")
	}
	name := fmt.Sprintf("yonder-agent-nft-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return "/run/netns/" + name
}

// nftRuleset lists the namespace's tables, chains and rule counts as "family table/chain: n".
func nftRuleset(g Gomega) []string {
	c, err := nftables.New()
	g.Expect(err).NotTo(HaveOccurred())
	chains, err := c.ListChains()
	g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, ch := range chains {
		rules, err := c.GetRules(ch.Table, ch)
		g.Expect(err).NotTo(HaveOccurred())
		out = append(out, fmt.Sprintf("%s/%s: %d", tableKey(ch.Table), ch.Name, len(rules)))
	}
	return out
}

// Reset's netfilter step removes the node's chains (KUBE-*, CNI-*) and the rules jumping to them, and the
// tables the node created once nothing but empty accepting base chains is left; a table that was there
// before, and the host's own chains and rules, stay. Run again (a reset cut short), it converges.
func TestResetRemovesTheNodesChainsAndTheTablesItCreated(t *testing.T) {
	g := NewWithT(t)
	ns := testNetns(t)
	accept := nftables.ChainPolicyAccept
	g.Expect(inNetns(ns, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		// The host had "ip nat" with a chain of its own; the node's kubelet created "ip filter" (as
		// iptables does: base chains, then its chain and jumps) and added a chain to "ip nat".
		nat := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "nat"})
		own := c.AddChain(&nftables.Chain{Name: "HOST-OWN", Table: nat})
		c.AddRule(&nftables.Rule{Table: nat, Chain: own, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
		c.AddChain(&nftables.Chain{Name: "CNI-HOSTPORT-DNAT", Table: nat})
		filter := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"})
		input := c.AddChain(&nftables.Chain{Name: "INPUT", Table: filter, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
		fw := c.AddChain(&nftables.Chain{Name: "KUBE-FIREWALL", Table: filter})
		c.AddRule(&nftables.Rule{Table: filter, Chain: fw, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		c.AddRule(&nftables.Rule{Table: filter, Chain: input, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "KUBE-FIREWALL"}}})
		return c.Flush()
	})).To(Succeed())
	found := &state.Network{Tables: []string{"ip nat"}}

	for i := range 2 {
		rep := &ResetReport{}
		var left []string
		g.Expect(inNetns(ns, func() error {
			if errs := rep.removeNodeChains(found); len(errs) > 0 {
				return fmt.Errorf("%v", errs)
			}
			left = nftRuleset(g)
			return nil
		})).To(Succeed())
		g.Expect(left).To(ConsistOf("ip nat/HOST-OWN: 1"), "run %d", i+1)
		if i == 0 {
			g.Expect(rep.Removed).To(ConsistOf("netfilter chain ip nat CNI-HOSTPORT-DNAT", "netfilter rule ip filter INPUT: jump KUBE-FIREWALL",
				"netfilter chain ip filter KUBE-FIREWALL", "netfilter table ip filter"))
		} else {
			g.Expect(rep.Removed).To(BeEmpty(), "a second run finds nothing")
		}
	}
}

// Reset removes what the network add-on's yonder-net-node leaves when its node is killed with the host's
// reset: its links (yonder-wg, yonder-vx, …) and its YONDER-VXLAN filter chain with the rule jumping to
// it. A link of that prefix the host had when the machine first ran (recorded then) stays, and so does the
// recorded table. Run again, reset finds nothing.
func TestResetRemovesTheNetworkAddonsLinksAndChain(t *testing.T) {
	g := NewWithT(t)
	ns := testNetns(t)
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"-n", ns[len("/run/netns/"):]}, args...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "ip %v: %s", args, out)
	}
	ip("link", "add", "yonder-keep", "type", "bridge")
	accept := nftables.ChainPolicyAccept
	g.Expect(inNetns(ns, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		filter := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"})
		c.AddChain(&nftables.Chain{Name: "INPUT", Table: filter, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
		return c.Flush()
	})).To(Succeed())
	// What the host phase records before the machine first runs.
	r := &run{o: &Options{NetworkNamespacePath: ns}, st: &state.State{}, store: state.Store{Dir: t.TempDir()}}
	g.Expect(r.recordNetwork()).To(Succeed())
	g.Expect(r.st.Network.Links).To(ConsistOf("lo", "yonder-keep"))
	g.Expect(r.st.Network.Tables).To(ContainElement("ip filter"))

	// The add-on's devices and filter, as yonder-net-node makes them.
	ip("link", "add", "yonder-vx", "type", "vxlan", "id", "4242", "dstport", "4789", "local", "127.0.0.1")
	ip("tuntap", "add", "yonder-wg", "mode", "tun") // userspace WireGuard's device
	g.Expect(inNetns(ns, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		filter := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "filter"}
		vx := c.AddChain(&nftables.Chain{Name: "YONDER-VXLAN", Table: filter})
		c.AddRule(&nftables.Rule{Table: filter, Chain: vx, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		c.AddRule(&nftables.Rule{Table: filter, Chain: &nftables.Chain{Name: "INPUT", Table: filter},
			Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "YONDER-VXLAN"}}})
		return c.Flush()
	})).To(Succeed())

	for i := range 2 {
		rep := &ResetReport{}
		var links, left []string
		g.Expect(inNetns(ns, func() error {
			errs := append(rep.removeAddonLinks(r.st.Network), rep.removeNodeChains(r.st.Network)...)
			if len(errs) > 0 {
				return fmt.Errorf("%v", errs)
			}
			ls, err := netlink.LinkList()
			for _, l := range ls {
				links = append(links, l.Attrs().Name)
			}
			left = nftRuleset(g)
			return err
		})).To(Succeed())
		g.Expect(links).To(ConsistOf("lo", "yonder-keep"), "run %d", i+1)
		g.Expect(left).To(ConsistOf("ip filter/INPUT: 0"), "run %d", i+1)
		if i == 0 {
			g.Expect(rep.Removed).To(ConsistOf("link yonder-vx (vxlan)", "link yonder-wg (tuntap)",
				"netfilter rule ip filter INPUT: jump YONDER-VXLAN", "netfilter chain ip filter YONDER-VXLAN"))
		} else {
			g.Expect(rep.Removed).To(BeEmpty(), "a second run finds nothing")
		}
	}
}

// A host whose namespace had the bridge netfilter sysctls off gets them on for the node (kube-proxy's
// rules then see replies that cross the pod bridge), recorded first; a second run changes nothing; reset
// puts the host's values back.
func TestBridgeNetfilterIsOnForTheNodeAndResetRestoresIt(t *testing.T) {
	g := NewWithT(t)
	ns := testNetns(t)
	read := func(k string) string {
		var v string
		g.Expect(inNetns(ns, func() error {
			b, err := os.ReadFile(sysctlPath(k))
			v = strings.TrimSpace(string(b))
			return err
		})).To(Succeed())
		return v
	}
	g.Expect(inNetns(ns, func() error {
		for _, k := range bridgeSysctls {
			if err := os.WriteFile(sysctlPath(k), []byte("0\n"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})).To(Succeed())
	r := &run{o: &Options{NetworkNamespacePath: ns}, st: &state.State{}, store: state.Store{Dir: t.TempDir()}}
	g.Expect(r.recordNetwork()).To(Succeed())
	for _, k := range bridgeSysctls {
		g.Expect(r.st.Network.Sysctls).To(HaveKeyWithValue(k, "0"), "recorded as the host had it")
	}

	changed, err := r.enableBridgeNetfilter(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(ConsistOf("net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"))
	for _, k := range bridgeSysctls {
		g.Expect(read(k)).To(Equal("1"), k)
	}
	changed, err = r.enableBridgeNetfilter(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeEmpty(), "already on")

	rep := &ResetReport{}
	g.Expect(rep.resetNetwork(Options{NetworkNamespacePath: ns}, r.st)).To(BeEmpty())
	for _, k := range bridgeSysctls {
		g.Expect(read(k)).To(Equal("0"), k)
		g.Expect(rep.Removed).To(ContainElement("sysctl restored: " + k + "=0"))
	}
}
