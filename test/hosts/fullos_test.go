package hosts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/stack"
)

// Two full-OS hosts: each is reached over SSH with its pinned host key, runs systemd as PID 1 with sshd,
// containerd and a waiting kubelet as units (the state the kubeadm packages leave a machine in), reports
// kubeadm and kubelet of the tested Kubernetes version, and has a filesystem of its own.
func TestFullOSHostsBootWithSystemdAndServeSSH(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := labnet.NewForTest(t)
	start := time.Now()
	hs, err := hosts.StartFullOS(ctx, n, "fullos", 2, hosts.FullOSOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("two full-OS hosts accepted SSH %s after the start", time.Since(start).Round(time.Second))

	for _, h := range hs {
		// The boot is finished when systemd says so; "running" means no unit failed.
		out, err := h.Output(ctx, "systemctl is-system-running --wait")
		g.Expect(err).NotTo(HaveOccurred(), "host %s: %s\nfailed units: %s\ntheir logs:\n%s", h.Name, out,
			must(h.Output(ctx, "systemctl --failed --no-legend")),
			must(h.Output(ctx, "for u in $(systemctl --failed --no-legend --plain | cut -d' ' -f1); do systemctl status --no-pager -l $u; journalctl -b --no-pager -n 30 -u $u; done")))
		g.Expect(strings.TrimSpace(out)).To(Equal("running"))

		out, err = h.Output(ctx, "cat /proc/1/comm; hostname; systemctl is-active ssh containerd; systemctl is-enabled kubelet; "+
			"systemctl show -p ActiveState --value kubelet; test -e /var/lib/kubelet/config.yaml && echo configured; true")
		g.Expect(err).NotTo(HaveOccurred(), out)
		// The kubelet waits for kubeadm, as after installing the packages: enabled, restarting without a
		// configuration (seen between two restarts or during one), never given up on.
		g.Expect(strings.Fields(out)).To(HaveExactElements("systemd", h.Name, "active", "active", "enabled",
			BeElementOf("activating", "active")))

		out, err = h.Output(ctx, "kubeadm version -o short && kubelet --version && ctr version | grep -c Version")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(strings.Fields(out)).To(HaveExactElements(stack.KubernetesVersion, "Kubernetes", stack.KubernetesVersion, "2"), "kubeadm, the kubelet and containerd's client and server")
	}

	// Separate cgroups in every hierarchy, the one systemd tracks units in included: two machines' systemd
	// sharing a cgroup create and remove each other's unit cgroups, and units fail with 219/CGROUP.
	cg0, cg1 := hs[0].InitCgroups(), hs[1].InitCgroups()
	g.Expect(cg0).NotTo(BeEmpty())
	g.Expect(cg1).To(HaveLen(len(cg0)))
	top := func(path string) string { return strings.SplitN(strings.TrimPrefix(path, "/"), "/", 2)[0] }
	for hierarchy, path := range cg0 {
		g.Expect(cg1).To(HaveKey(hierarchy))
		g.Expect(top(path)).NotTo(Equal(top(cg1[hierarchy])), "hierarchy %s: %s and %s share a subtree", hierarchy, path, cg1[hierarchy])
	}

	// Separate filesystems: what one host writes, the other does not see.
	_, err = hs[0].Output(ctx, "echo mine > /etc/yonder-fullos-test")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := hs[1].Output(ctx, "test -e /etc/yonder-fullos-test && echo shared || echo separate")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(out)).To(Equal("separate"))
}

func must(s string, _ error) string { return s }
