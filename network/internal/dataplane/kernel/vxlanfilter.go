package kernel

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// VXLANFilterChain admits underlay VXLAN packets only from the peers the plan names. The kernel's VXLAN
// device decapsulates whatever reaches its UDP port with the right VNI, learning off or not: without this,
// anyone who can send to a node's underlay address could inject frames into its pod network. The packets
// are filtered in INPUT, before the UDP socket decapsulates them. (The VXLAN device inside WireGuard is
// restricted to the WireGuard devices by Clamp.)
const VXLANFilterChain = "YONDER-VXLAN"

// vxlanFilterRules are the chain's rules, as `iptables -S` prints them: RETURN for every planned underlay
// VXLAN peer (RETURN, not ACCEPT: the host's own INPUT rules still apply to them), DROP for everyone else.
func vxlanFilterRules(st desired.State) []string {
	var peers []netip.Addr
	for _, h := range st.Hops {
		// The underlay VXLAN device is IPv4 (it has no IPv6 socket), so only IPv4 peers reach it.
		if h.Via == desired.ViaVXLAN && h.Underlay.Is4() {
			peers = append(peers, h.Underlay)
		}
	}
	slices.SortFunc(peers, netip.Addr.Compare)
	peers = slices.Compact(peers)
	rules := make([]string, 0, len(peers)+1)
	for _, p := range peers {
		rules = append(rules, fmt.Sprintf("-A %s -s %s/32 -j RETURN", VXLANFilterChain, p))
	}
	return append(rules, fmt.Sprintf("-A %s -j DROP", VXLANFilterChain))
}

// vxlanJump sends the underlay VXLAN port's packets through the chain.
func vxlanJump() []string {
	return []string{"INPUT", "-p", "udp", "--dport", strconv.Itoa(desired.DefaultVXLANPort), "-j", VXLANFilterChain}
}

// filterVXLAN is Apply's phase that makes the chain admit exactly the planned peers and sends the VXLAN
// port through it. It reads both first and writes only when either differs (a restarted daemon adopts the
// rules it finds; the periodic resync repairs a chain or jump edited behind its back). The chain and the
// jump go in one iptables-restore, so no packet ever sees a half-written chain, nor a chain that is written
// but not yet jumped to: whoever sees the chain sees it in force.
func (r *applyRun) filterVXLAN() error {
	want := vxlanFilterRules(r.st)
	have, err := exec.Command("iptables", "-w", "-t", "filter", "-S", VXLANFilterChain).Output()
	chainOK := err == nil && slices.Equal(chainRules(have), want)
	jumpOK := exec.Command("iptables", append([]string{"-w", "-t", "filter", "-C"}, vxlanJump()...)...).Run() == nil
	if chainOK && jumpOK {
		return nil
	}
	var in bytes.Buffer
	fmt.Fprintf(&in, "*filter\n:%s - [0:0]\n-F %s\n%s\n", VXLANFilterChain, VXLANFilterChain, strings.Join(want, "\n"))
	if !jumpOK {
		// First in INPUT: a host rule accepting the port must not let strangers past the filter.
		fmt.Fprintf(&in, "-I %s\n", strings.Join(vxlanJump(), " "))
	}
	in.WriteString("COMMIT\n")
	cmd := exec.Command("iptables-restore", "-w", "--noflush")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to write iptables chain %s and send VXLAN port %d through it: %w: %s", VXLANFilterChain, desired.DefaultVXLANPort, err, out)
	}
	r.a.Writes.Filter++
	return nil
}

// chainRules are the -A lines of `iptables -S <chain>` output.
func chainRules(out []byte) []string {
	var rules []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	return rules
}

// RemoveVXLANFilter removes the jump and the chain (the daemon's cleanup on exit); absent ones are fine.
func RemoveVXLANFilter() error {
	jump := append([]string{"-w", "-t", "filter", "-D"}, vxlanJump()...)
	for range 8 { // every copy (bounded: a broken iptables must not spin)
		if exec.Command("iptables", jump...).Run() != nil {
			break
		}
	}
	if exec.Command("iptables", "-w", "-t", "filter", "-S", VXLANFilterChain).Run() != nil {
		return nil
	}
	for _, op := range []string{"-F", "-X"} {
		if out, err := exec.Command("iptables", "-w", "-t", "filter", op, VXLANFilterChain).CombinedOutput(); err != nil {
			return fmt.Errorf("failed to remove iptables chain %s: %w: %s", VXLANFilterChain, err, out)
		}
	}
	return nil
}
