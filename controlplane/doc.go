// Command yonder-controlplane-manager is the root of Yonder's control-plane adapter (clusterctl name
// control-plane-yonder, binary yonder-controlplane-manager): YonderControlPlane attaches an EXISTING
// conformant cluster as a CAPI Cluster's control plane, so CAPI marks it initialized and watches its
// Nodes. Layout: STYLE.md.
package main
