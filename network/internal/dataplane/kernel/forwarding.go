package kernel

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// Setup sets the sysctls forwarding needs (idempotent); Clamp adds the MSS clamping rules.
func Setup() error {
	return setup("/proc/sys")
}

// conntrackLiberal is the sysctl that keeps conntrack from marking a TCP segment INVALID for falling outside the
// window it tracked. The eBPF program redirects every segment of a cross-site flow after its handshake past
// the sending node's netfilter, so each node's conntrack sees one direction of the flow and only the
// handshake of the other. A kernel whose conntrack accepts no ACK beyond the data it saw (Linux 5.15's
// tcp_in_window, for one) then marks the ACKs at the receiving end INVALID, and kube-proxy's KUBE-FORWARD
// chain (the cluster's, on every Node) drops INVALID packets: the connection stalls. Recent kernels (the
// 6.18 of the development machine) let those ACKs pass, and the lab's transfers succeed there without it.
// It exists once the nf_conntrack module is loaded; without conntrack nothing is marked INVALID.
const conntrackLiberal = "net/netfilter/nf_conntrack_tcp_be_liberal"

func setup(root string) error {
	for k, v := range map[string]string{
		"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/default/rp_filter": "0",
		conntrackLiberal: "1",
	} {
		p := filepath.Join(root, k)
		if k == conntrackLiberal {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				continue
			}
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil { //nolint:gosec // sysctl files
			return fmt.Errorf("failed to set sysctl %s: %w", k, err)
		}
	}
	return nil
}

// Clamp installs MSS clamping of forwarded TCP SYNs to the path MTU of their route (the routes carry the
// tunnel path's MTU; the eBPF program leaves SYNs to the kernel, so every SYN passes here at each node it
// crosses, in both directions), and restricts the inner VXLAN port to packets arriving through the node's
// WireGuard devices (both slots: a key rotation runs two at once).
func Clamp(wireGuardDevices ...string) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("failed to find iptables for MSS clamping: %w", err)
	}
	port := strconv.Itoa(desired.VXLANOverWireGuardPort)
	// The single-device rule of earlier versions would drop the second slot's traffic.
	if len(wireGuardDevices) > 0 {
		legacy := []string{"-w", "-t", "filter", "-D", "INPUT", "-p", "udp", "--dport", port, "!", "-i", wireGuardDevices[0], "-j", "DROP"}
		for range 8 { // every copy (bounded: a broken iptables must not spin)
			if exec.Command("iptables", legacy...).Run() != nil {
				break
			}
		}
	}
	type rule struct {
		insert bool // accept rules go first, before the drop
		spec   []string
	}
	var rules []rule
	for _, d := range wireGuardDevices {
		rules = append(rules, rule{true, []string{"-t", "filter", "INPUT", "-p", "udp", "--dport", port, "-i", d, "-j", "ACCEPT"}})
	}
	rules = append(rules,
		rule{false, []string{"-t", "filter", "INPUT", "-p", "udp", "--dport", port, "-j", "DROP"}},
		rule{false, []string{"-t", "mangle", "FORWARD", "-p", "tcp", "--tcp-flags", "SYN,RST", "SYN", "-j", "TCPMSS", "--clamp-mss-to-pmtu"}})
	for _, r := range rules {
		check := append([]string{"-w", r.spec[0], r.spec[1], "-C"}, r.spec[2:]...)
		if exec.Command("iptables", check...).Run() == nil {
			continue
		}
		op := "-A"
		if r.insert {
			op = "-I"
		}
		add := append([]string{"-w", r.spec[0], r.spec[1], op}, r.spec[2:]...)
		if out, err := exec.Command("iptables", add...).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to add iptables rule %v: %w: %s", r.spec, err, out)
		}
	}
	return nil
}
