package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// hostState is what a host holds that a node could leave behind, as "kind identity" → details: links
// (kind, master, addresses), routes of every table, rules, permanent neighbours, the netfilter ruleset
// (iptables and ip6tables, legacy and nf_tables backends, and nft's whole ruleset), the network
// namespace's sysctls, and the host's directory tree (paths, modes, content digests). Counters, dynamic
// entries and other churn that is not state are left out, so two snapshots of an untouched host are equal.
type hostState map[string]string

// snapshotHost records h's state: its network namespace and its directory.
func snapshotHost(t testing.TB, h *hosts.Host) hostState {
	t.Helper()
	s := hostState{}
	s.network(t, h.NamespacePath)
	if err := s.files(t, h.Dir); err != nil {
		t.Fatalf("snapshot of %s: %v", h.Dir, err)
	}
	return s
}

// diff lists, readably, what after has that s has not ("added link cni0 bridge 10.244.2.1/24", "left
// file etc/yonder/agent-config.yaml"), what it lost ("removed …") and what changed; nothing when equal.
// A directory that is new (or gone) is listed alone, not with everything inside it.
func (s hostState) diff(after hostState) []string {
	var out []string
	added := func(k string) bool { _, ok := s[k]; return !ok }
	removed := func(k string) bool { _, ok := after[k]; return !ok }
	for _, k := range slices.Sorted(maps.Keys(after)) {
		switch {
		case added(k) && !underNewDir(k, added):
			verb := "added"
			if strings.HasPrefix(k, "file ") || strings.HasPrefix(k, "dir ") {
				verb = "left"
			}
			out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", verb, k, after[k])))
		case !added(k) && s[k] != after[k]:
			out = append(out, fmt.Sprintf("changed %s: %s → %s", k, s[k], after[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if removed(k) && !underNewDir(k, removed) {
			out = append(out, strings.TrimSpace(fmt.Sprintf("removed %s %s", k, s[k])))
		}
	}
	return out
}

// underNewDir says whether file key k lies below a directory for which isNew holds.
func underNewDir(k string, isNew func(string) bool) bool {
	p, ok := strings.CutPrefix(k, "file ")
	if !ok {
		if p, ok = strings.CutPrefix(k, "dir "); !ok {
			return false
		}
	}
	for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
		if isNew("dir " + d) {
			return true
		}
	}
	return false
}

// inNetns runs a command in the network namespace at ns and returns its stdout.
func inNetns(ns string, args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + ns, "--"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// netnsSysctls are the sysctls of a network namespace a node may change: forwarding (the CNI bridge
// plugin turns it on for its gateway), and every setting of all/default interfaces, which new
// interfaces inherit. Per-interface settings go with their links.
var netnsSysctls = []string{"net/ipv4/ip_forward", "net/ipv4/conf/all", "net/ipv4/conf/default", "net/ipv6/conf/all",
	"net/ipv6/conf/default", "net/ipv4/ip_local_port_range", "net/ipv4/ip_nonlocal_bind", "net/ipv4/ping_group_range",
	"net/ipv4/ip_unprivileged_port_start", "net/bridge", "net/core/somaxconn"}

func (s hostState) network(t testing.TB, ns string) {
	t.Helper()
	// An address still in duplicate address detection gets its local route when DAD ends: wait for it.
	NewWithT(t).Eventually(func() (string, error) {
		out, err := inNetns(ns, "ip", "-6", "address", "show", "tentative")
		return strings.TrimSpace(out), err
	}, 30*time.Second, 100*time.Millisecond).Should(BeEmpty(), "network namespace %s: addresses still tentative", ns)
	must := func(args ...string) string {
		out, err := inNetns(ns, args...)
		if err != nil {
			t.Fatalf("snapshot of network namespace %s: %v", ns, err)
		}
		return out
	}
	var links []struct {
		Name     string   `json:"ifname"`
		Master   string   `json:"master"`
		Flags    []string `json:"flags"`
		MTU      int      `json:"mtu"`
		LinkInfo *struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
		Addrs []struct {
			Family string `json:"family"`
			Local  string `json:"local"`
			Prefix int    `json:"prefixlen"`
			Scope  string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(must("ip", "-d", "-j", "address", "show")), &links); err != nil {
		t.Fatalf("ip -j address: %v", err)
	}
	for _, l := range links {
		var d []string
		if l.LinkInfo != nil && l.LinkInfo.Kind != "" {
			d = append(d, l.LinkInfo.Kind)
		}
		if l.Master != "" {
			d = append(d, "master "+l.Master)
		}
		if slices.Contains(l.Flags, "UP") {
			d = append(d, "up")
		}
		d = append(d, fmt.Sprintf("mtu %d", l.MTU))
		addrs := make([]string, 0, len(l.Addrs))
		for _, a := range l.Addrs {
			if a.Family == "inet6" && a.Scope == "link" {
				continue // derived from the link's MAC address: it goes with the link
			}
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.Local, a.Prefix))
		}
		sort.Strings(addrs)
		s["link "+l.Name] = strings.Join(append(addrs, d...), " ")
	}
	lines := func(kind, out string, drop *regexp.Regexp) {
		for _, l := range strings.Split(out, "\n") {
			l = strings.Join(strings.Fields(l), " ")
			if drop != nil {
				l = strings.Join(strings.Fields(drop.ReplaceAllString(l, "")), " ")
			}
			if l == "" {
				continue
			}
			k := kind + " " + l
			if _, dup := s[k]; dup {
				s[k] += "+" // the same rule twice is state too
			} else {
				s[k] = ""
			}
		}
	}
	// IPv6 routes age; cached and link-down flags follow the links, not the routes.
	routeChurn := regexp.MustCompile(`\bexpires -?\d+sec\b|\blinkdown\b`)
	lines("route", must("ip", "-4", "route", "show", "table", "all"), routeChurn)
	lines("route6", must("ip", "-6", "route", "show", "table", "all"), routeChurn)
	lines("rule", must("ip", "-4", "rule", "show"), nil)
	lines("rule6", must("ip", "-6", "rule", "show"), nil)
	lines("neighbour", must("ip", "neigh", "show", "nud", "permanent"), nil)
	lines("neighbour6", must("ip", "-6", "neigh", "show", "nud", "permanent"), nil)
	// Both iptables backends: the machine's rootfs may use either. Comment lines carry dates; chain lines
	// carry packet counters.
	saveChurn := regexp.MustCompile(`^#.*$|^COMMIT$|\[\d+:\d+\]$`)
	for _, save := range []string{"iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save", "ip6tables-nft-save"} {
		for _, table := range strings.Split(strings.TrimSpace(must(save)), "\n*") {
			name, rules, _ := strings.Cut(strings.TrimPrefix(table, "*"), "\n")
			if name != "" {
				lines(save+" "+name, rules, saveChurn)
			}
		}
	}
	s.nft(must("nft", "list", "ruleset"))
	// One grep reads them all (a process per file costs seconds on a loaded machine); unreadable ones
	// (stable_secret) and absent ones (net/bridge without br_netfilter) are skipped.
	script := `cd /proc/sys && grep -rsH '' "$@"; exit 0`
	for _, l := range strings.Split(must(append([]string{"sh", "-c", script, "sh"}, netnsSysctls...)...), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			s["sysctl "+strings.ReplaceAll(k, "/", ".")] = strings.Join(strings.Fields(v), " ")
		}
	}
}

// nft records nft's ruleset: each table, chain, set and rule under the blocks that hold it ("nft table ip
// nat / chain POSTROUTING: masquerade"), without counters.
func (s hostState) nft(ruleset string) {
	counters := regexp.MustCompile(`\bcounter packets \d+ bytes \d+`)
	var blocks []string
	for _, l := range strings.Split(ruleset, "\n") {
		l = strings.Join(strings.Fields(counters.ReplaceAllString(l, "")), " ")
		switch {
		case l == "":
		case l == "}":
			if len(blocks) > 0 {
				blocks = blocks[:len(blocks)-1]
			}
		case strings.HasSuffix(l, "{"):
			blocks = append(blocks, strings.TrimSpace(strings.TrimSuffix(l, "{")))
			s["nft "+strings.Join(blocks, " / ")] = ""
		default:
			k := "nft " + strings.Join(blocks, " / ") + ": " + l
			if _, dup := s[k]; dup {
				s[k] += "+"
			} else {
				s[k] = ""
			}
		}
	}
}

// hostOwnFiles are files of the test host itself whose content changes without any node (sshd's log).
var hostOwnFiles = map[string]bool{"sshd.log": true}

// files records dir's tree: each path with its type and mode, regular files with their sha256, links
// with their target.
func (s hostState) files(t testing.TB, dir string) error {
	t.Helper()
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil //nolint:nilerr // gone while walking: not there
		}
		switch {
		case d.IsDir():
			s["dir "+rel] = info.Mode().String()
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			s["file "+rel] = info.Mode().String() + " -> " + target
		case d.Type().IsRegular() && !hostOwnFiles[rel]:
			s["file "+rel] = info.Mode().String() + " sha256:" + sha(t, p)[:16]
		default:
			s["file "+rel] = info.Mode().String()
		}
		return nil
	})
}

// The snapshot itself: two snapshots of an untouched host are equal; a bridge with an address, an
// iptables chain, forwarding turned on and a config file written are each named in the diff; once they
// are undone the host is as found again.
func TestHostStateSnapshotNamesWhatWasLeft(t *testing.T) {
	g := NewWithT(t)
	h := startHost(t, labnet.NewForTest(t), "hs")
	found := snapshotHost(t, h)
	g.Expect(found.diff(snapshotHost(t, h))).To(BeEmpty(), "an untouched host must snapshot the same")
	g.Expect(found).To(HaveKey("link lo"))
	g.Expect(found).To(HaveKeyWithValue("sysctl net.ipv4.ip_forward", "0"))

	sh := func(script string) {
		t.Helper()
		_, err := inNetns(h.NamespacePath, "sh", "-c", "set -e; "+script)
		g.Expect(err).NotTo(HaveOccurred())
	}
	sh(`ip link add hs-br0 type bridge && ip addr add 10.99.0.1/24 dev hs-br0 && ip link set hs-br0 up
iptables-nft -t nat -N HS-TEST && echo 1 > /proc/sys/net/ipv4/ip_forward`)
	g.Expect(os.MkdirAll(filepath.Join(h.Dir, "etc", "yonder"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(h.Dir, "etc", "yonder", "agent-config.yaml"), []byte("token\n"), 0o600)).To(Succeed())
	d := found.diff(snapshotHost(t, h))
	g.Expect(d).To(ContainElements(
		"added link hs-br0 10.99.0.1/24 bridge up mtu 1500",
		"added route 10.99.0.0/24 dev hs-br0 proto kernel scope link src 10.99.0.1",
		"added iptables-nft-save nat :HS-TEST -",
		"added nft table ip nat / chain HS-TEST",
		"changed sysctl net.ipv4.ip_forward: 0 → 1",
		"left dir etc/yonder drwxr-xr-x",
	), "%s", strings.Join(d, "\n"))
	g.Expect(d).NotTo(ContainElement(HavePrefix("left file etc/yonder/")), "a new directory is named alone")

	sh(`ip link del hs-br0 && iptables-nft -t nat -X HS-TEST && echo 0 > /proc/sys/net/ipv4/ip_forward`)
	g.Expect(found.diff(snapshotHost(t, h))).To(ConsistOf("added iptables-nft-save nat :INPUT ACCEPT", "added iptables-nft-save nat :OUTPUT ACCEPT",
		"added iptables-nft-save nat :POSTROUTING ACCEPT", "added iptables-nft-save nat :PREROUTING ACCEPT", "added nft table ip nat",
		"left dir etc/yonder drwxr-xr-x"), "an empty table and an emptied directory are still left")
	sh(`nft delete table ip nat`)
	g.Expect(os.RemoveAll(filepath.Join(h.Dir, "etc", "yonder"))).To(Succeed())
	g.Expect(found.diff(snapshotHost(t, h))).To(BeEmpty())
}
