package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/yonder-dev/yonder/hostruntime/internal/render"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// The node's machine shares the host's network namespace (or the one --network-namespace-path names), so
// what its kubelet and CNI plugins create there outlives the machine: the CNI bridge with the Node's
// gateway address (a reused host's next Node, with another pod CIDR, could start no pod: "cni0" already
// has an IP address different from …), the veths of pods, the kubelet's iptables chains and the tables
// they live in, and IP forwarding turned on. The host phase records what the namespace held before the
// machine first ran; reset removes what the node added and restores the recorded sysctls.

// netnsSysctls are the per-namespace sysctls the node changes: the CNI bridge plugin turns on forwarding for
// its gateway (the kernel then also changes the interfaces' forwarding and redirects, and restoring these
// restores those), the host phase turns on bridgeSysctls, and the network add-on's yonder-net-node turns
// off reverse-path filtering and makes conntrack liberal about TCP windows (docs/network-dataplane.md). A
// sysctl the namespace does not have when it is recorded (no IPv6, conntrack not loaded yet) is not restored.
var netnsSysctls = append([]string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding",
	"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter", "net.netfilter.nf_conntrack_tcp_be_liberal"},
	bridgeSysctls...)

// bridgeSysctls pass the frames of the node's pod bridge through the namespace's iptables (br_netfilter).
// The cluster's kube-proxy (or any Service proxy built on netfilter) sends a pod's connection to a
// Service's ClusterIP to one of its endpoints with DNAT; when that endpoint is a pod on the same bridge,
// its replies go straight across the bridge and, without these, never meet the conntrack entry that would
// undo the DNAT, so the client gets answers from an address it never called and the connection fails.
// kubeadm's install guide asks for the same. Per network namespace since Linux 5.3.
var bridgeSysctls = []string{"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"}

// nodeChainPrefixes name the netfilter chains that belong to a Kubernetes node: the kubelet's
// (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT), kube-proxy's (KUBE-*), the CNI plugins'
// (portmap's CNI-HOSTPORT-*, the bridge plugin's masquerade chains CNI-*) and the network add-on's
// (yonder-net-node's YONDER-VXLAN filter, removed by the daemon only when it exits cleanly).
var nodeChainPrefixes = []string{"KUBE-", "CNI-", "YONDER-"}

// addonLinkPrefix starts the names of the links the network add-on's yonder-net-node creates in the node's
// namespace (its defaults: yonder-wg for WireGuard, yonder-vx and yonder-vw for VXLAN). A node killed with
// its host's reset never removes them. Reset deletes the links of this prefix that were not there when the
// machine first ran, so a link of that name the host had before is kept.
const addonLinkPrefix = "yonder-"

func nodeChain(name string) bool {
	for _, p := range nodeChainPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// nftFamilies are the table families the iptables nf_tables backend (Debian's default) writes.
var nftFamilies = []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6}

// inNetns runs fn on a thread in the network namespace at path ("" : the agent's own).
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: one whose namespace could not be restored must not be reused.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("failed to open the agent's network namespace: %w", err)
			return
		}
		defer func() { _ = orig.Close() }()
		target, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("failed to open network namespace %s: %w", path, err)
			return
		}
		defer func() { _ = target.Close() }()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("failed to enter network namespace %s: %w", path, err)
			return
		}
		err = fn()
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// recordNetwork records the node's network namespace as found, once: a re-run (or an upgrade) must not
// record the node's own changes as the host's.
func (r *run) recordNetwork() error {
	if r.st.Network != nil {
		return nil
	}
	n := &state.Network{NamespacePath: r.o.NetworkNamespacePath, Sysctls: map[string]string{}}
	err := inNetns(r.o.NetworkNamespacePath, func() error {
		for _, k := range netnsSysctls {
			v, err := os.ReadFile(sysctlPath(k))
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6 in this namespace, no conntrack loaded
			}
			if err != nil {
				return fmt.Errorf("failed to read sysctl %s: %w", k, err)
			}
			n.Sysctls[k] = strings.TrimSpace(string(v))
		}
		links, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("failed to list links: %w", err)
		}
		for _, l := range links {
			n.Links = append(n.Links, l.Attrs().Name)
		}
		slices.Sort(n.Links)
		tables, err := nftTables()
		n.Tables = tables
		return err
	})
	if err != nil {
		return err
	}
	r.st.Network = n
	return r.store.Save(r.st)
}

// enableBridgeNetfilter turns bridgeSysctls on in the node's namespace, loading br_netfilter first where the
// host has not (its sysctls exist only with the module). recordNetwork ran before, so reset restores the
// values a host had; a module this loaded stays loaded after reset, as kubeadm's hosts keep it (a kernel
// module is shared with everything else on the host, and unloading it could break whatever uses it since).
func (r *run) enableBridgeNetfilter(ctx context.Context) ([]string, error) {
	var changed []string
	err := inNetns(r.o.NetworkNamespacePath, func() error {
		if !fileExists(sysctlPath(bridgeSysctls[0])) {
			if out, err := exec.CommandContext(ctx, "modprobe", "br_netfilter").CombinedOutput(); err != nil {
				return fmt.Errorf("failed to load br_netfilter (modprobe br_netfilter: %w: %s): pods would not reach Services whose endpoints are pods on their own Node", err, strings.TrimSpace(string(out)))
			}
			if !fileExists(sysctlPath(bridgeSysctls[0])) {
				return fmt.Errorf("br_netfilter is loaded but %s does not exist", sysctlPath(bridgeSysctls[0]))
			}
		}
		for _, k := range bridgeSysctls {
			have, err := os.ReadFile(sysctlPath(k))
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6
			}
			if err != nil {
				return fmt.Errorf("failed to read sysctl %s: %w", k, err)
			}
			if strings.TrimSpace(string(have)) == "1" {
				continue
			}
			if err := os.WriteFile(sysctlPath(k), []byte("1\n"), 0o644); err != nil { //nolint:gosec // a sysctl, not a file
				return fmt.Errorf("failed to set sysctl %s=1: %w", k, err)
			}
			changed = append(changed, k+"=1")
		}
		return nil
	})
	return changed, err
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// nftTables lists the namespace's nftables tables of nftFamilies as "<family> <name>"; none where the
// kernel has no nf_tables.
func nftTables() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("failed to open nftables: %w", err)
	}
	var out []string
	for _, f := range nftFamilies {
		ts, err := c.ListTablesOfFamily(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "protocol not supported") {
				return nil, nil
			}
			return nil, fmt.Errorf("failed to list nftables tables: %w", err)
		}
		for _, t := range ts {
			out = append(out, tableKey(t))
		}
	}
	slices.Sort(out)
	return out, nil
}

func tableKey(t *nftables.Table) string {
	fam := "ip"
	if t.Family == nftables.TableFamilyIPv6 {
		fam = "ip6"
	}
	return fam + " " + t.Name
}

// resetNetwork removes what the node added to its network namespace and restores the recorded sysctls.
// The machine is stopped by now, so nothing adds them back; every step finds its own leftovers, so a
// reset cut short and run again converges.
func (rep *ResetReport) resetNetwork(o Options, st *state.State) []error {
	ns := o.NetworkNamespacePath
	if ns == "" && st.Network != nil {
		ns = st.Network.NamespacePath // the machine ran in another namespace than reset's
	}
	if ns != "" && !fileExists(ns) {
		rep.Removed = append(rep.Removed, "network namespace "+ns+" (gone, with everything in it)")
		return nil
	}
	var errs []error
	err := inNetns(ns, func() error {
		errs = append(errs, rep.removeCNILinks()...)
		errs = append(errs, rep.removeAddonLinks(st.Network)...)
		errs = append(errs, rep.removeNodeChains(st.Network)...)
		if st.Network != nil {
			for _, k := range slices.Sorted(maps.Keys(st.Network.Sysctls)) {
				want := st.Network.Sysctls[k]
				have, err := os.ReadFile(sysctlPath(k))
				if err != nil || strings.TrimSpace(string(have)) == want {
					continue
				}
				if err := os.WriteFile(sysctlPath(k), []byte(want+"\n"), 0o644); err != nil { //nolint:gosec // a sysctl, not a file
					errs = append(errs, fmt.Errorf("failed to restore sysctl %s=%s: %w", k, want, err))
					continue
				}
				rep.Removed = append(rep.Removed, "sysctl restored: "+k+"="+want)
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

// removeCNILinks deletes the CNI bridge and the pods' veths still attached to it (a pod's veth goes with
// its network namespace, unless something still holds that).
func (rep *ResetReport) removeCNILinks() []error {
	br, err := netlink.LinkByName(render.CNIBridge)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return []error{fmt.Errorf("failed to look up link %s: %w", render.CNIBridge, err)}
	}
	if br.Type() != "bridge" {
		rep.Kept = append(rep.Kept, "link "+render.CNIBridge+" (a "+br.Type()+", not the CNI bridge)")
		return nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return []error{fmt.Errorf("failed to list links: %w", err)}
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index && l.Type() == "veth" {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("failed to delete link %s: %w", l.Attrs().Name, err))
				continue
			}
			rep.Removed = append(rep.Removed, "link "+l.Attrs().Name)
		}
	}
	if err := netlink.LinkDel(br); err != nil {
		return append(errs, fmt.Errorf("failed to delete link %s: %w", render.CNIBridge, err))
	}
	rep.Removed = append(rep.Removed, "link "+render.CNIBridge)
	return errs
}

// removeAddonLinks deletes the network add-on's links (addonLinkPrefix) that found does not record. Without
// a record (a host bootstrapped by an agent that kept none) nothing is known to be the node's, and they
// are kept.
func (rep *ResetReport) removeAddonLinks(found *state.Network) []error {
	if found == nil {
		return nil
	}
	links, err := netlink.LinkList()
	if err != nil {
		return []error{fmt.Errorf("failed to list links: %w", err)}
	}
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, addonLinkPrefix) || slices.Contains(found.Links, name) {
			continue
		}
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("failed to delete link %s: %w", name, err))
			continue
		}
		rep.Removed = append(rep.Removed, "link "+name+" ("+l.Type()+")")
	}
	return errs
}

// removeNodeChains deletes the node's netfilter chains (nodeChainPrefixes) and the rules elsewhere that
// jump to them, then the tables the node created (not in found) that are left empty: base chains only,
// without rules, accepting.
func (rep *ResetReport) removeNodeChains(found *state.Network) []error {
	c, err := nftables.New()
	if err != nil {
		return []error{fmt.Errorf("failed to open nftables: %w", err)}
	}
	var errs []error
	for _, fam := range nftFamilies {
		chains, err := c.ListChainsOfTableFamily(fam)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "protocol not supported") {
				return nil // no nf_tables in this kernel: nothing can be there
			}
			return []error{fmt.Errorf("failed to list nftables chains: %w", err)}
		}
		byTable := map[string][]*nftables.Chain{}
		tables := map[string]*nftables.Table{}
		for _, ch := range chains {
			k := tableKey(ch.Table)
			byTable[k], tables[k] = append(byTable[k], ch), ch.Table
		}
		for _, k := range slices.Sorted(maps.Keys(tables)) {
			if err := rep.cleanTable(c, tables[k], byTable[k], found); err != nil {
				errs = append(errs, fmt.Errorf("table %s: %w", k, err))
			}
		}
	}
	return errs
}

func (rep *ResetReport) cleanTable(c *nftables.Conn, t *nftables.Table, chains []*nftables.Chain, found *state.Network) error {
	var owned, kept []*nftables.Chain
	for _, ch := range chains {
		if nodeChain(ch.Name) {
			owned = append(owned, ch)
		} else {
			kept = append(kept, ch)
		}
	}
	rulesLeft := 0
	for _, ch := range kept {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return fmt.Errorf("failed to list the rules of chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			if target := jumpTarget(r); target != "" && nodeChain(target) {
				if err := c.DelRule(r); err != nil {
					return err
				}
				rep.Removed = append(rep.Removed, fmt.Sprintf("netfilter rule %s %s: jump %s", tableKey(t), ch.Name, target))
				continue
			}
			rulesLeft++
		}
	}
	for _, ch := range owned {
		c.FlushChain(ch)
	}
	for _, ch := range owned {
		c.DelChain(ch)
		rep.Removed = append(rep.Removed, fmt.Sprintf("netfilter chain %s %s", tableKey(t), ch.Name))
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("failed to remove the node's chains: %w", err)
	}
	// A table the node created (iptables creates a table with its base chains on first use) goes when
	// nothing but empty, accepting base chains is left in it.
	if found == nil || slices.Contains(found.Tables, tableKey(t)) || rulesLeft > 0 {
		return nil
	}
	for _, ch := range kept {
		if ch.Hooknum == nil || (ch.Policy != nil && *ch.Policy != nftables.ChainPolicyAccept) {
			return nil
		}
	}
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("failed to remove the table: %w", err)
	}
	rep.Removed = append(rep.Removed, "netfilter table "+tableKey(t))
	return nil
}

// jumpTarget is the chain a rule jumps or goes to, or "".
func jumpTarget(r *nftables.Rule) string {
	for _, e := range r.Exprs {
		if v, ok := e.(*expr.Verdict); ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) {
			return v.Chain
		}
	}
	return ""
}
