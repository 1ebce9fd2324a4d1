package sitetest

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/yonder-dev/yonder/network/internal/dataplane/topo"
)

// dropCounters are the kernel's counters of packets dropped or refused, per namespace of the topology
// (nodes and pods): every link's rx/tx dropped and errors, and the IP, ICMP and UDP counters of
// /proc/net/snmp that count a discard, a missing route or port, or a full socket buffer. Keys are
// "namespace/link/counter" and "namespace/Proto/counter".
type dropCounters map[string]uint64

// snmpDrops are the /proc/net/snmp counters that count a packet not delivered (or an ICMP error sent).
var snmpDrops = map[string][]string{
	"Ip":   {"InHdrErrors", "InAddrErrors", "InUnknownProtos", "InDiscards", "OutDiscards", "OutNoRoutes", "ReasmFails", "FragFails"},
	"Icmp": {"OutDestUnreachs", "InDestUnreachs"},
	"Udp":  {"NoPorts", "InErrors", "RcvbufErrors", "SndbufErrors", "InCsumErrors"},
}

// drops reads the drop counters of every node and pod namespace.
func (s *Sites) drops() (dropCounters, error) {
	out := dropCounters{}
	var nss []string
	for _, n := range s.Nodes {
		nss = append(nss, n.NS, n.Pod)
	}
	for _, ns := range nss {
		err := topo.RunIn(ns, func() error {
			links, err := netlink.LinkList()
			if err != nil {
				return err
			}
			for _, l := range links {
				st := l.Attrs().Statistics
				if st == nil {
					continue
				}
				p := ns + "/" + l.Attrs().Name + "/"
				out[p+"rx_dropped"], out[p+"tx_dropped"] = st.RxDropped, st.TxDropped
				out[p+"rx_errors"], out[p+"tx_errors"] = st.RxErrors, st.TxErrors
			}
			// The thread's own namespace (the process's /proc/net is the main thread's).
			b, err := os.ReadFile("/proc/thread-self/net/snmp")
			if err != nil {
				return err
			}
			return parseSNMP(ns, string(b), out)
		})
		if err != nil {
			return nil, fmt.Errorf("failed to read drop counters in %s: %w", ns, err)
		}
	}
	return out, nil
}

// parseSNMP adds the counters of snmpDrops from /proc/net/snmp's header/value line pairs.
func parseSNMP(ns, text string, out dropCounters) error {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) != len(values) || len(names) == 0 {
			return fmt.Errorf("unexpected /proc/net/snmp lines %q, %q", lines[i], lines[i+1])
		}
		proto := strings.TrimSuffix(names[0], ":")
		for _, want := range snmpDrops[proto] {
			for j, n := range names {
				if n != want {
					continue
				}
				v, err := strconv.ParseUint(values[j], 10, 64)
				if err != nil {
					return fmt.Errorf("failed to parse %s %s: %w", proto, n, err)
				}
				out[ns+"/"+proto+"/"+n] = v
			}
		}
	}
	return nil
}

// since lists the counters that grew from before to c, sorted ("key +delta").
func (c dropCounters) since(before dropCounters) []string {
	var out []string
	for k, v := range c {
		if v > before[k] {
			out = append(out, fmt.Sprintf("%s +%d", k, v-before[k]))
		}
	}
	sort.Strings(out)
	return out
}
