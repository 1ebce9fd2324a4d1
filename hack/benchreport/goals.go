package main

import (
	"fmt"
	"strings"
)

// Goal is what a benchmark must reach (issue 21) and, for benchmarks that do not follow the unit
// convention, which of their metrics are the figure, the baseline and the ratio.
type Goal struct {
	Text                    string
	Figure, Baseline, Ratio string
	Checks                  []Check
}

// Check is one comparison of a reported metric with a limit.
type Check struct {
	Unit   string
	AtMost bool // false: at least
	Limit  float64
}

// goals, by benchmark name (the longest matching prefix wins, so a sub-benchmark inherits its parent's).
var goals = map[string]Goal{
	"TFTPVersusTFTPDHPA": {Text: "≥ 1.0× tftpd-hpa throughput (50 clients, iPXE binaries, blksize + windowsize)",
		Checks: []Check{{Unit: "x-baseline", Limit: 1.0}}},
	"HTTPVersusNginx": {Text: "≥ 1.0× nginx throughput (50 clients, kernel + initrd), p99 reported",
		Checks: []Check{{Unit: "x-baseline", Limit: 1.0}}},
	"DHCPPerfdhcpVersusKea": {Text: "≥ 1.3× Kea (10,000 reservations); p99 < 5 ms",
		Figure: "yonder-offers/s", Baseline: "kea-offers/s", Ratio: "yonder/kea",
		Checks: []Check{{Unit: "yonder/kea", Limit: 1.3}}},
	"ProvisionMachinesOnSimulatedHosts": {Text: "200 Machines Provisioned ≤ 45 s; ≤ 12 API requests per Machine; peak RSS ≤ 300 MiB",
		Figure: "s-to-provisioned",
		Checks: []Check{{Unit: "s-to-provisioned", AtMost: true, Limit: 45}, {Unit: "apireq/machine", AtMost: true, Limit: 12}, {Unit: "peak-RSS-MiB", AtMost: true, Limit: 300}}},
	"BootstrapToNodeReady": {Text: "Machine → Node Ready, warm host, 20 samples: p50 ≤ 5 s, p95 ≤ 10 s", Figure: "s-to-ready",
		Baseline: "s-baseline", Ratio: "x-baseline",
		Checks: []Check{{Unit: "s-to-ready", AtMost: true, Limit: 5}, {Unit: "p95-s-to-ready", AtMost: true, Limit: 10}}},
	"RegisterInspect": {Text: "10,000 BareMetalHosts registered + inspected: ≤ 14 Redfish requests per host; time, CPU and RSS reported; no host starves",
		Figure: "s-to-available", Baseline: "s-baseline",
		Checks: []Check{{Unit: "redfish-req/host", AtMost: true, Limit: 14}}},
	// The goal is for WireGuard without VXLAN inside: the --wireguard-l3 pod path. The default path
	// (VXLAN inside) is among the other metrics (wireguard-x-veth).
	"DataplaneThroughput": {Text: "pod-to-pod over WireGuard, no VXLAN inside (--wireguard-l3 path) ≥ 0.3× veth (iperf3); CPU per Gbit/s reported",
		Figure: "wireguard-l3-path-Gbit/s", Baseline: "veth-Gbit/s", Ratio: "wireguard-l3-path-x-veth",
		Checks: []Check{{Unit: "wireguard-l3-path-x-veth", Limit: 0.3}}},
	"HostStartup":    {Text: "(no goal: test tier cost) a host with sshd vs a bare namespace", Figure: "ms/host", Baseline: "baseline-ms/netns"},
	"ProbeResponder": {Text: "(no goal: planning figure) CPU a gateway spends answering fast probes; cores at 1,000 and 5,000 probing nodes", Figure: "cpu-us/probe"},
	"ProberReplies": {Text: "(no goal: scaling check) a probe reply's cost at a gateway watching 600 gateways vs one target (≈ 1×: targets indexed by address)",
		Figure: "ns/reply", Baseline: "baseline-ns/reply"},
	"GatewayFailover": {Text: "gateway failover: measured loss window < 300 ms (worst of the run's failovers)",
		Checks: []Check{{Unit: "ms-loss-window", AtMost: true, Limit: 300}}},
	"RoutePlan": {Text: "route plan: 50,000 nodes, 200 sites ≤ 1 s; one node change ≤ 50 ms and ≤ 5 writes",
		Checks: []Check{{Unit: "ms/full-plan", AtMost: true, Limit: 1000}, {Unit: "ms/node-change", AtMost: true, Limit: 50}, {Unit: "writes/node-change", AtMost: true, Limit: 5}}},
}

func goalFor(name string) Goal {
	best, bestLen := Goal{}, -1
	for prefix, g := range goals {
		if strings.HasPrefix(name, prefix) && len(prefix) > bestLen {
			best, bestLen = g, len(prefix)
		}
	}
	return best
}

// status says whether the metrics meet every check: "met", "MISSED (…)", or "—" when there is nothing to
// check or a checked metric was not reported.
func (g Goal) status(byUnit map[string]float64) string {
	if len(g.Checks) == 0 {
		return "—"
	}
	var missed []string
	for _, c := range g.Checks {
		v, ok := byUnit[c.Unit]
		if !ok {
			return fmt.Sprintf("— (%s not reported)", c.Unit)
		}
		if c.AtMost && v > c.Limit || !c.AtMost && v < c.Limit {
			op := "≥"
			if c.AtMost {
				op = "≤"
			}
			missed = append(missed, fmt.Sprintf("%s %s %g", c.Unit, op, c.Limit))
		}
	}
	if len(missed) > 0 {
		return "MISSED (" + strings.Join(missed, ", ") + ")"
	}
	return "met"
}
