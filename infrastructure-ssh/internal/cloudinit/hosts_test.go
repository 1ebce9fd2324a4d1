package cloudinit_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// hostWithPrivateEtc starts a real sshd host whose /etc is a copy private to the host (bound over /etc
// in the host's own mount namespace): useradd, groupadd and chpasswd then change the host's passwd,
// group and shadow files for real without touching this machine's. dir is the test's directory, shared
// with the host; it outlives the host.
func hostWithPrivateEtc(t *testing.T, prefix string) (h *sshhosts.Host, e sshexec.Executor, dir string) {
	t.Helper()
	g := NewWithT(t)
	dir = t.TempDir()
	hs, _ := sshhosts.StartForTest(t, prefix, 1)
	h = hs[0]
	ctx := context.Background()
	out, err := h.Output(ctx, "cp -a /etc "+dir+"/etc && mount --bind "+dir+"/etc /etc && mkdir -p "+dir+"/home")
	g.Expect(err).NotTo(HaveOccurred(), out)
	e, err = sshexec.SSHDialer{}.Dial(ctx, sshexec.Target{Endpoint: sshexec.Endpoint{Address: h.Address.String(), Port: h.Port, User: "root", Signer: h.ClientSigner, HostKey: h.HostKey}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = e.Close() })
	return h, e, dir
}

// runOnHost runs script on the host as the SSH provider does (a detached run with its log) and returns
// its exit code and log.
func runOnHost(t *testing.T, e sshexec.Executor, runID, script string) (int, string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	started, err := remote.Start(ctx, e, runID, script)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(started).To(BeTrue())
	var st remote.RunState
	g.Eventually(func() bool {
		st, err = remote.State(ctx, e, runID)
		g.Expect(err).NotTo(HaveOccurred())
		return st.Finished
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue())
	log, err := remote.LogTail(ctx, e, runID, 200)
	g.Expect(err).NotTo(HaveOccurred())
	return st.ExitCode, log
}

// On a real host over SSH: bootcmd runs first, then write_files, users (groups, gecos with shell
// metacharacters kept verbatim, home, shell, password hash, lock, sudo rule, authorized keys, a system
// user without home), deferred files owned by the user just created, runcmd last; a second run changes
// nothing and succeeds; no value of the data was run by the shell and the hash is in no log.
func TestModulesRunOnARealHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, e, dir := hostWithPrivateEtc(t, "ciusers")
	hostile := `Alice $(touch ` + dir + `/pwned) ` + "`touch " + dir + "/pwned2`" + ` "q" it's`
	key := `ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests alice@example $(touch ` + dir + `/pwned3)`
	hash := "$6$cKxL5hBq1Xc8Y0tE$0cSgv2Hn8t4sZkQ3c3qvD2pW8J8Qj0Jq5m8b3dVgM0sN0q1Jq2J6Ww4GQ7oQ4k6n4rJ1c9x3b5y7z8a0b1c2d3."
	yq := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	data := "#cloud-config\n" +
		"bootcmd:\n- test ! -e " + dir + "/early && echo boot >> " + dir + "/order\n" +
		"write_files:\n- path: " + dir + "/early\n  content: early\n" +
		"- path: " + dir + "/home/yci-alice/notes\n  owner: yci-alice:yci-ops\n  permissions: '0640'\n  defer: true\n  content: deferred\n" +
		"users:\n- name: yci-alice\n  gecos: " + yq(hostile) + "\n  groups: yci-ops, yci-dev\n  shell: /bin/sh\n  homedir: " + dir + "/home/yci-alice\n" +
		"  passwd: " + yq(hash) + "\n  lock_passwd: false\n  sudo: 'ALL=(ALL) NOPASSWD:ALL'\n  ssh_authorized_keys:\n  - " + yq(key) + "\n" +
		"- name: yci-svc\n  system: true\n  primary_group: yci-svcgrp\n" +
		"runcmd:\n- test -f " + dir + "/home/yci-alice/notes && echo run >> " + dir + "/order\n"
	cfg, err := cloudinit.Parse([]byte(data), cloudinit.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	code, log := runOnHost(t, e, "users-1", cfg.Script())
	g.Expect(code).To(Equal(0), log)
	g.Expect(log).NotTo(ContainSubstring(hash))
	order, err := os.ReadFile(filepath.Join(dir, "order"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(order)).To(Equal("boot\nrun\n"), "bootcmd before write_files, deferred files before runcmd")

	check := func() {
		out, err := h.Output(ctx, "getent passwd yci-alice; id -nG yci-alice; getent shadow yci-alice | cut -d: -f2; "+
			"stat -c '%U:%G %a' "+dir+"/home/yci-alice/notes "+dir+"/home/yci-alice/.ssh "+dir+"/home/yci-alice/.ssh/authorized_keys "+cloudinit.SudoersFile+"; "+
			"cat "+dir+"/home/yci-alice/.ssh/authorized_keys "+cloudinit.SudoersFile+"; "+
			"getent passwd yci-svc | cut -d: -f3,4,6; getent group yci-svcgrp | cut -d: -f3; getent shadow yci-svc | cut -d: -f2")
		g.Expect(err).NotTo(HaveOccurred(), out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines).To(HaveLen(14), out)
		g.Expect(lines[0]).To(MatchRegexp(`^yci-alice:x:\d+:\d+:` + regexp.QuoteMeta(hostile) + `:` + dir + `/home/yci-alice:/bin/sh$`))
		g.Expect(strings.Fields(lines[1])).To(ConsistOf("yci-alice", "yci-ops", "yci-dev"))
		g.Expect(lines[2]).To(Equal(hash), "password set and, with lock_passwd false, not locked")
		g.Expect(lines[3:7]).To(Equal([]string{"yci-alice:yci-ops 640", "yci-alice:yci-alice 700", "yci-alice:yci-alice 600", "root:root 440"}))
		g.Expect(lines[7]).To(Equal(key))
		g.Expect(lines[8:11]).To(Equal([]string{"", "# User rules for yci-alice", "yci-alice ALL=(ALL) NOPASSWD:ALL"}))
		svc := strings.Split(lines[11], ":")
		g.Expect(svc[0]).To(HaveLen(3), "a system uid below 1000: %s", lines[11])
		g.Expect(svc[1]).To(Equal(lines[12]), "primary group")
		g.Expect(lines[13]).To(HavePrefix("!"), "lock_passwd defaults to true")
		_, err = os.Stat(svc[2])
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "a system user gets no home directory")
	}
	check()

	// Again, as after a controller restart that lost the run record: nothing is added twice.
	g.Expect(os.Remove(filepath.Join(dir, "early"))).To(Succeed())
	code, log = runOnHost(t, e, "users-2", cfg.Script())
	g.Expect(code).To(Equal(0), log)
	check()

	for _, f := range []string{"pwned", "pwned2", "pwned3"} {
		g.Expect(filepath.Join(dir, f)).NotTo(BeAnExistingFile(), "data reached the shell unquoted")
	}
	mine, err := exec.Command("getent", "passwd", "yci-alice").CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "the user exists only in the host's /etc: %s", mine)
}

// ntp on a host without a usable time client fails its module (exit 92) with a message saying what to
// install, before runcmd could report success.
func TestNTPWithoutATimeClientFailsOnARealHost(t *testing.T) {
	g := NewWithT(t)
	_, e, dir := hostWithPrivateEtc(t, "cintp")
	cfg, err := cloudinit.Parse([]byte("#cloud-config\nntp:\n  enabled: true\n  servers: [time.example]\nruncmd:\n- touch "+dir+"/ran\n"), cloudinit.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	code, log := runOnHost(t, e, "ntp-1", cfg.Script())
	g.Expect(code).To(Equal(cloudinit.ExitNTP), log)
	want := "ntp: the host has no time client (chrony or systemd-timesyncd)"
	if _, err := os.Stat("/lib/systemd/systemd-timesyncd"); err == nil {
		// The host shares this machine's files but not its PID 1: timesyncd is there, systemd is not.
		want = "ntp: systemd-timesyncd is installed but systemd is not running"
	}
	g.Expect(log).To(ContainSubstring(want))
	g.Expect(log).To(ContainSubstring("yonder-ssh: ntp failed"))
	g.Expect(filepath.Join(dir, "ran")).NotTo(BeAnExistingFile())
}
