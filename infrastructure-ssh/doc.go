// Package infrastructuressh is the root of Yonder's SSH infrastructure provider (clusterctl name
// infrastructure-yonder-ssh, binary yonder-ssh-manager): a persistent inventory of existing Linux hosts
// (YonderSSHHost) that YonderSSHMachines claim, bootstrap over SSH with pinned host keys, and release
// back to the pool when their Machine goes away. Layout: STYLE.md.
package infrastructuressh
