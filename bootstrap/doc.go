// Command yonder-bootstrap-manager is the root of Yonder's bootstrap provider (clusterctl name bootstrap-yonder, binary
// yonder-bootstrap-manager): YonderConfig and YonderConfigTemplate in bootstrap.cluster.x-k8s.io. It
// renders each Machine's bootstrap data Secret (cloud-init that installs yonder-agent and writes its
// AgentConfig) and manages the bootstrap token in the workload cluster. Layout: STYLE.md.
package main
