// Package e2e is Yonder's end-to-end lifecycle suite: the real clusterctl installs the providers into a
// management apiserver, the provider Deployments run as processes (package test/stack), clusterctl
// generates Clusters from templates/, and workers join a separate workload control plane as Ready Nodes
// through the real yonder-agent on network-namespace hosts. One stack serves every scenario, in order.
package e2e
