package nspawn

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const mountinfo = `22 27 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
35 30 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,cpu,cpuacct
90 35 0:31 /machine.slice /mnt/inner rw - cgroup cgroup rw,memory
`

func TestHierarchiesAreTheMountsAtTheirRootV1AndV2(t *testing.T) {
	g := NewWithT(t)
	p := filepath.Join(t.TempDir(), "mountinfo")
	g.Expect(os.WriteFile(p, []byte(mountinfo), 0o644)).To(Succeed())
	c := Cgroups{Name: "yonder-a", MountInfo: p}
	hs, err := c.Hierarchies()
	g.Expect(err).NotTo(HaveOccurred())
	// The cgroup2 hierarchy counts as well: systemd-nspawn places its payload by it on a hybrid host.
	g.Expect(hs).To(Equal([]string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"}))
	paths, err := c.Paths()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths).To(ContainElement("/sys/fs/cgroup/memory/yonder-a"))
	// A unified host has one hierarchy, the cgroup2 one at /sys/fs/cgroup.
	v2 := filepath.Join(t.TempDir(), "mountinfo-v2")
	g.Expect(os.WriteFile(v2, []byte("22 27 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"+
		"30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"), 0o644)).To(Succeed())
	paths, err = Cgroups{Name: "yonder-a", MountInfo: v2}.Paths()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(paths).To(Equal([]string{"/sys/fs/cgroup/yonder-a"}))
	// A name that is not one directory below each root is refused before anything is killed or removed.
	for _, name := range []string{"", ".", "..", "a/b", "../yonder-a"} {
		bad := Cgroups{Name: name, MountInfo: p}
		_, err := bad.Paths()
		g.Expect(err).To(MatchError(ContainSubstring("is not a single directory name")), "%q", name)
		g.Expect(bad.KillAndRemove(time.Second)).To(MatchError(ContainSubstring("is not a single directory name")), "%q", name)
	}
}

func TestArgsFollowTheMeasuredRecipe(t *testing.T) {
	g := NewWithT(t)
	c := Config{Name: "yonder-a", Rootfs: "/var/lib/yonder/machines/yonder-a", NetworkNamespacePath: "/run/netns/h1",
		DeviceBinds: []string{"/dev/nvidia0:/dev/nvidia0"}}
	args := c.Args(false)
	g.Expect(args).To(ContainElements("--boot", "--register=no", "--keep-unit", "--link-journal=no", "--capability=all",
		"--bind-ro=/dev/kmsg", "--resolv-conf=off", "--system-call-filter=@keyring bpf",
		"--network-namespace-path=/run/netns/h1", "--bind=/dev/nvidia0:/dev/nvidia0", "--machine=yonder-a"))
	g.Expect(Config{Binds: []string{"/sys/fs/bpf"}}.Args(false)).To(ContainElement("--bind=/sys/fs/bpf"))
	g.Expect(Config{ReadOnlyBinds: []string{"/lib/modules"}}.Args(false)).To(ContainElement("--bind-ro=/lib/modules"))
	g.Expect(c.Args(true)).NotTo(ContainElement("--register=no"))
	g.Expect(c.Digest()).To(Equal(c.Digest()))
	c2 := c
	c2.DeviceBinds = nil
	g.Expect(c2.Digest()).NotTo(Equal(c.Digest()), "a changed launch configuration restarts the machine")
	g.Expect(Env).To(ContainElements("SYSTEMD_NSPAWN_API_VFS_WRITABLE=network", "SYSTEMD_SECCOMP=0"))
}
