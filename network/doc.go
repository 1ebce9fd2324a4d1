// Package network is the root of Yonder's multi-site networking add-on (network.yonder.dev): the
// yonder-net-controller that assigns Nodes to Sites and publishes a route plan, and the yonder-net-node
// dataplane (WireGuard, VXLAN, eBPF) on every node. It runs in the workload cluster, independent of CAPI.
package network
