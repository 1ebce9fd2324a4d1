package hosts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/osimage"
)

// A cloud-image host runs its NoCloud data with the image's own cloud-init, as a cloud's instance does:
// cloud-init finishes without an error, reports the NoCloud datasource and the meta-data the cloud gave
// (hostname, providerid), and ran the user data's write_files and runcmd, on systemd as PID 1, reachable
// on the lab network, with writable cgroup hierarchies (a node machine's agent creates cgroups).
func TestCloudImageHostRunsItsNoCloudData(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	n := labnet.NewForTest(t)
	start := time.Now()
	h, err := hosts.StartCloudImage(ctx, n, "cloud", img, hosts.CloudImageOptions{
		UserData: []byte("#cloud-config\nwrite_files:\n- path: /etc/from-user-data\n  content: seeded\n  permissions: '0640'\n" +
			"runcmd:\n- [sh, -c, 'echo ran $(cat /etc/from-user-data) > /var/lib/runcmd-result']\n"),
		ProviderID: "e2e-cloud:///cloud",
	})
	g.Expect(err).NotTo(HaveOccurred())
	out, err := h.RunInMachine(ctx, "cloud-init status --wait --long")
	g.Expect(err).NotTo(HaveOccurred(), "cloud-init failed: %s\n%s", out, must(h.RunInMachine(ctx, "tail -n 40 /var/log/cloud-init.log")))
	t.Logf("cloud-init done %s after the start", time.Since(start).Round(time.Second))
	g.Expect(out).To(ContainSubstring("status: done"))
	g.Expect(out).To(ContainSubstring("DataSourceNoCloud"))

	out, err = h.RunInMachine(ctx, "cat /proc/1/comm; hostname; cloud-init query ds.meta_data.providerid; cat /var/lib/runcmd-result; stat -c %a /etc/from-user-data; "+
		"stat -c %a /var/lib/cloud/seed/nocloud/user-data; command -v systemd-nspawn; command -v curl; "+
		"d=/sys/fs/cgroup/pids; [ -d $d ] || d=/sys/fs/cgroup; mkdir $d/probe && rmdir $d/probe && echo cgroups writable")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Split(strings.TrimSpace(out), "\n")).To(HaveExactElements("systemd", "cloud", "e2e-cloud:///cloud", "ran seeded", "640", "600",
		"/usr/bin/systemd-nspawn", "/usr/bin/curl", "cgroups writable"))

	// The lab network is the platform's: the namespace's address, untouched by the image's networkd.
	out, err = h.RunInMachine(ctx, "ip -4 -o addr show scope global")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring(" " + h.Address.String() + "/"))
}
