// Package hostruntime is the root of yonder-agent, which runs on every host: it turns a plain Linux host
// into a Node by running containerd and kubelet inside a systemd-nspawn machine, TLS-bootstraps the
// kubelet, and resets the host cleanly when the Machine goes away.
package hostruntime
