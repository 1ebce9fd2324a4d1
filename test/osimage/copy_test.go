package osimage_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/osimage"
)

// A run in a copy sees the image's files and the files placed for it, may write anywhere (even set the
// hostname), and leaves nothing: the next copy is the pristine image again, this machine's hostname is
// unchanged, and no mount or loop device of the copy remains.
func TestRunInCopy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	img, err := osimage.Cached(ctx, osimage.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	// The copies' directories (and so their loop devices' backing files) are under a directory of this test.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	host, err := os.Hostname()
	g.Expect(err).NotTo(HaveOccurred())

	res, err := img.RunInCopy(ctx, osimage.CopyRun{
		Files:   []osimage.File{{Path: "/opt/yci/new/tool", Mode: 0o750, Content: []byte("#!/bin/sh\necho tool ran\n")}},
		Command: "/opt/yci/new/tool; echo changed > /etc/os-release; hostname yci-copy; echo oops >&2; exit 3",
		Report:  "stat -c '%a %U' /opt/yci/new /opt/yci/new/tool; cat /etc/os-release; hostname; dpkg-query -W -f '${Status}\\n' cloud-init; ls /dev/console 2>&1 || true",
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(3))
	g.Expect(string(res.Output)).To(Equal("tool ran\noops\n"))
	g.Expect(strings.Split(strings.TrimSpace(string(res.Report)), "\n")).To(Equal([]string{
		"755 root", "750 root", "changed", "yci-copy", "install ok installed", "ls: cannot access '/dev/console': No such file or directory",
	}))

	res, err = img.RunInCopy(ctx, osimage.CopyRun{Command: "grep -q '^ID=debian' /etc/os-release && test ! -e /opt/yci"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(BeZero(), "the second copy is the pristine image: %s", res.Output)
	g.Expect(os.Hostname()).To(Equal(host))

	_, err = img.RunInCopy(ctx, osimage.CopyRun{Files: []osimage.File{{Path: "/etc/../x"}}})
	g.Expect(err).To(MatchError(ContainSubstring("not a clean absolute path")))
	_, err = img.RunInCopy(ctx, osimage.CopyRun{Command: "true", Report: "exit 1"})
	g.Expect(err).To(HaveOccurred(), "a failed report is an error")

	loops, err := exec.CommandContext(ctx, "losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(loops)).NotTo(ContainSubstring(tmp), "no loop device of a copy left")
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mounts)).NotTo(ContainSubstring(tmp), "no mount left")
	left, err := os.ReadDir(tmp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(left).To(BeEmpty(), "no directory of a copy left")
}
