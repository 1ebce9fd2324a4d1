package remote_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

func target(h *sshhosts.Host) sshexec.Target {
	return sshexec.Target{Endpoint: sshexec.Endpoint{Address: h.Address.String(), Port: h.Port, User: "root", Signer: h.ClientSigner, HostKey: h.HostKey}}
}

// Against real sshd hosts: a bootstrap run starts detached, is not started twice, is observed to
// finish with its sentinel on that host only, is cleaned up; facts are gathered; the connection errors
// a controller must tell apart (host key mismatch, refused key, nobody listening) are typed.
func TestRunLifecycleAndErrorsOnRealHosts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hs, _ := sshhosts.StartForTest(t, "rm", 2)
	e, err := sshexec.SSHDialer{}.Dial(ctx, target(hs[0]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = e.Close() }()

	cfg, err := cloudinit.Parse([]byte("#cloud-config\nwrite_files:\n- path: /etc/kubernetes/x.conf\n  content: hello\n  permissions: '0600'\nruncmd:\n- sleep 1\n- mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"), cloudinit.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	started, err := remote.Start(ctx, e, "run-1", cfg.Script())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(started).To(BeTrue())
	again, err := remote.Start(ctx, e, "run-1", cfg.Script())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeFalse(), "a run is started once")
	g.Eventually(func() remote.RunState {
		s, err := remote.State(ctx, e, "run-1")
		g.Expect(err).NotTo(HaveOccurred())
		return s
	}, 20*time.Second, 200*time.Millisecond).Should(Equal(remote.RunState{Started: true, Finished: true, ExitCode: 0, Sentinel: true}))
	out, err := hs[0].Output(ctx, "stat -c %a /etc/kubernetes/x.conf && cat /etc/kubernetes/x.conf")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("600\nhello"))
	// The other host has its own filesystem view.
	out, _ = hs[1].Output(ctx, "ls /run/cluster-api 2>&1 || true")
	g.Expect(out).To(ContainSubstring("No such file"))

	// The log is bounded, without cutting the run short.
	started, err = remote.Start(ctx, e, "run-2", "head -c 9437184 /dev/zero; echo done > /var/lib/yonder-ssh/after-log\nexit 4\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(started).To(BeTrue())
	g.Eventually(func() remote.RunState {
		s, err := remote.State(ctx, e, "run-2")
		g.Expect(err).NotTo(HaveOccurred())
		return s
	}, 20*time.Second, 200*time.Millisecond).Should(HaveField("ExitCode", 4))
	out, err = hs[0].Output(ctx, "stat -c %s /var/lib/yonder-ssh/runs/run-2/log && cat /var/lib/yonder-ssh/after-log")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(fmt.Sprintf("%d\ndone\n", remote.MaxLogBytes)))

	f, err := remote.Probe(ctx, e)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.Hostname).To(Equal(hs[0].Name))
	g.Expect(f.CPUs).To(BeNumerically(">", 0))
	g.Expect(f.MemoryBytes).To(BeNumerically(">", 0))
	g.Expect(f.Arch).NotTo(BeEmpty())

	g.Expect(remote.Cleanup(ctx, e, "run-1", infrav1.CleanupSpec{Commands: []string{"rm -f /etc/kubernetes/x.conf"}})).To(Succeed())
	s, err := remote.State(ctx, e, "run-1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(remote.RunState{}))
	g.Expect(remote.Cleanup(ctx, e, "run-1", infrav1.CleanupSpec{Commands: []string{"false"}})).To(MatchError(ContainSubstring("cleanup command failed")))

	checkConnectionErrors(ctx, g, hs)
}

// checkConnectionErrors asserts that the connection errors a controller must tell apart are typed (host
// key mismatch, refused key, nobody listening, no key to trust) and that a bastion reaches a host.
func checkConnectionErrors(ctx context.Context, g *WithT, hs []*sshhosts.Host) {
	// Host key mismatch: host 0 pinned with host 1's key.
	bad := target(hs[0])
	bad.HostKey = hs[1].HostKey
	_, err := sshexec.SSHDialer{}.Dial(ctx, bad)
	var mm *sshexec.HostKeyMismatchError
	g.Expect(err).To(BeAssignableToTypeOf(mm))
	// Refused key.
	_, other, _ := sshhosts.NewClientKey()
	bad = target(hs[0])
	bad.Signer = other
	_, err = sshexec.SSHDialer{}.Dial(ctx, bad)
	var auth *sshexec.AuthError
	g.Expect(err).To(BeAssignableToTypeOf(auth))
	// Nobody listening.
	bad = target(hs[0])
	bad.Port = 2222
	_, err = sshexec.SSHDialer{Timeout: 2 * time.Second}.Dial(ctx, bad)
	var unr *sshexec.UnreachableError
	g.Expect(err).To(BeAssignableToTypeOf(unr))
	// Trust on first use records the presented key.
	tofu2 := target(hs[1])
	tofu2.HostKey = nil
	tofu2.RecordHostKey = nil
	_, err = sshexec.SSHDialer{}.Dial(ctx, tofu2)
	g.Expect(err).To(MatchError(sshexec.ErrNoHostKey), "no key and no recording: never connect")
	// Through a bastion: host 1 reaches host 0.
	via := target(hs[0])
	b := target(hs[1]).Endpoint
	via.Bastion = &b
	e2, err := sshexec.SSHDialer{}.Dial(ctx, via)
	g.Expect(err).NotTo(HaveOccurred())
	o, _, err := e2.Run(ctx, "hostname", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(o))).To(Equal(hs[0].Name))
	_ = e2.Close()
}

// Trust on first use: the key presented is handed to the recorder, and the connection works.
func TestTrustOnFirstUseRecordsKey(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	keyPEM, _, err := sshhosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := sshhosts.Start(ctx, n, "tofu", 1, keyPEM)
	g.Expect(err).NotTo(HaveOccurred())
	tg := target(hs[0])
	tg.HostKey = nil
	var got string
	tg.RecordHostKey = func(k ssh.PublicKey) { got = sshexec.FormatHostKey(k) }
	e, err := sshexec.SSHDialer{}.Dial(ctx, tg)
	g.Expect(err).NotTo(HaveOccurred())
	_ = e.Close()
	g.Expect(got).To(Equal(sshexec.FormatHostKey(hs[0].HostKey)))
}

// cutUpload is an SSH session whose upload is cut: the host gets the first n bytes of stdin, then the
// end of its input (as when the writer dies) or, with stall, nothing more until stall ends.
type cutUpload struct {
	sshexec.Executor
	n     int64
	stall io.Reader
}

func (c cutUpload) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, []byte, error) {
	if stdin != nil {
		stdin = io.LimitReader(stdin, c.n)
		if c.stall != nil {
			stdin = io.MultiReader(stdin, c.stall)
		}
	}
	return c.Executor.Run(ctx, cmd, stdin)
}

// cutScript is longer than what a cut upload delivers; each run of it appends a line to cutMarks.
const (
	cutMarks  = "/var/lib/yonder-ssh/cut"
	cutScript = "echo first >> " + cutMarks + "\n" + "# padding\n# padding\n# padding\n# padding\n# padding\n" +
		"mkdir -p /run/cluster-api && echo success > /run/cluster-api/bootstrap-success.complete\n"
)

// cutUploadBytes is how much of cutScript a cut upload delivers.
const cutUploadBytes = 60

// runsDir lists the host's runs directory.
func runsDir(ctx context.Context, g Gomega, h *sshhosts.Host) string {
	out, err := h.Output(ctx, "ls -A "+remote.RunsDir)
	g.Expect(err).NotTo(HaveOccurred())
	return out
}

// expectWholeRunOnce starts run-cut on e after a cut upload: this start runs, the whole script runs
// once, and the runs directory holds that run only.
func expectWholeRunOnce(ctx context.Context, g Gomega, e sshexec.Executor, h *sshhosts.Host) {
	started, err := remote.Start(ctx, e, "run-cut", cutScript)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(started).To(BeTrue())
	g.Eventually(func() remote.RunState {
		s, err := remote.State(ctx, e, "run-cut")
		g.Expect(err).NotTo(HaveOccurred())
		return s
	}, 20*time.Second, 200*time.Millisecond).Should(Equal(remote.RunState{Started: true, Finished: true, ExitCode: 0, Sentinel: true}))
	out, err := h.Output(ctx, "cat "+cutMarks)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("first\n"), "the script ran once, whole")
	g.Expect(runsDir(ctx, g, h)).To(Equal("run-cut\n"), "no upload is left")
}

// A start whose upload is cut leaves no run (never a run of part of the script), and the next start
// runs the whole script; cleaning the host removes what the cut upload left.
func TestStartWithCutUploadLeavesNoRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hs, _ := sshhosts.StartForTest(t, "cut", 1)
	e, err := sshexec.SSHDialer{}.Dial(ctx, target(hs[0]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = e.Close() }()

	started, err := remote.Start(ctx, cutUpload{Executor: e, n: cutUploadBytes}, "run-cut", cutScript)
	g.Expect(err).To(HaveOccurred(), "a cut upload is an error, not a start")
	g.Expect(started).To(BeFalse())
	g.Expect(err.Error()).To(ContainSubstring("incomplete upload"))
	s, err := remote.State(ctx, e, "run-cut")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(remote.RunState{}), "no run was taken")

	expectWholeRunOnce(ctx, g, e, hs[0])

	// An upload cut where the host is killed too is left behind; cleaning the run removes it.
	_, err = hs[0].Output(ctx, "touch "+remote.RunsDir+"/.run-cut.AbC123")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.Cleanup(ctx, e, "run-cut", infrav1.CleanupSpec{})).To(Succeed())
	g.Expect(runsDir(ctx, g, hs[0])).To(BeEmpty())
}

// The connection itself cut mid-upload, as when the controller is killed: its SSH connection closes while
// the script streams. The host is left with neither a run nor the partial upload (the shell sees the end of
// its input, finds the upload short and removes it), and the next start, on a new connection, runs the
// whole script once.
func TestStartWithConnectionCutMidUploadLeavesNoRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hs, _ := sshhosts.StartForTest(t, "cutc", 1)

	cut, err := sshexec.SSHDialer{}.Dial(ctx, target(hs[0]))
	g.Expect(err).NotTo(HaveOccurred())
	stall, stop := io.Pipe()
	type result struct {
		started bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		started, err := remote.Start(ctx, cutUpload{cut, cutUploadBytes, stall}, "run-cut", cutScript)
		done <- result{started, err}
	}()
	g.Eventually(func() string {
		out, err := hs[0].Output(ctx, "stat -c %s "+remote.RunsDir+"/.run-cut.* 2>/dev/null; true")
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}, 20*time.Second, 100*time.Millisecond).Should(Equal(fmt.Sprintf("%d\n", cutUploadBytes)), "the upload is under way, part-way")
	g.Expect(runsDir(ctx, g, hs[0])).To(HavePrefix(".run-cut."), "only the upload: no run is taken before it is whole")
	g.Expect(cut.Close()).To(Succeed())
	stop.CloseWithError(io.ErrClosedPipe)
	var r result
	g.Eventually(done, 20*time.Second).Should(Receive(&r))
	g.Expect(r.err).To(HaveOccurred(), "a cut connection is an error, not a start")
	g.Expect(r.started).To(BeFalse())
	g.Eventually(func() string { return runsDir(ctx, g, hs[0]) }, 20*time.Second, 100*time.Millisecond).Should(BeEmpty(),
		"no run was taken and the partial upload is gone")

	e, err := sshexec.SSHDialer{}.Dial(ctx, target(hs[0]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = e.Close() }()
	expectWholeRunOnce(ctx, g, e, hs[0])
}

// On a host with the agent, cleanup is the agent's reset (the cleanup commands are for hosts without it),
// and keepAgentCache asks the agent to keep its caches. The agent here records what it was asked (the
// real agent's reset, with and without --keep-cache, is tested in hostruntime and by test/e2e's scale).
func TestCleanupRunsTheAgentsReset(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	hs, _ := sshhosts.StartForTest(t, "rst", 1)
	e, err := sshexec.SSHDialer{}.Dial(ctx, target(hs[0]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = e.Close() }()
	// /usr/local/bin is the host's own (sshhosts.PrivateDirs).
	_, err = hs[0].Output(ctx, "printf '#!/bin/sh\\necho \"$*\" >> /run/agent-calls\\n' > /usr/local/bin/yonder-agent && chmod 0755 /usr/local/bin/yonder-agent")
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(remote.Cleanup(ctx, e, "run-a", infrav1.CleanupSpec{Commands: []string{"touch /run/command-ran"}})).To(Succeed())
	g.Expect(remote.Cleanup(ctx, e, "run-b", infrav1.CleanupSpec{KeepAgentCache: true})).To(Succeed())
	out, err := hs[0].Output(ctx, "cat /run/agent-calls; test ! -e /run/command-ran && echo no-command")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(out, "\n")).To(Equal([]string{"reset", "reset --keep-cache", "no-command", ""}))
}
