// Package e2e holds yonder-agent's host tests: the real agent binary, run over SSH in network-namespace
// hosts (test/hosts), joins a real workload control plane (test/controlplane) with a kubelet and
// containerd from the test cache inside a systemd-nspawn machine. Helpers here build the node bundle
// (binaries, rootfs archive, OCI image archives) that the tests and `make bench` use.
package e2e
