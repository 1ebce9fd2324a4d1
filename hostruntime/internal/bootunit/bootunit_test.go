package bootunit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// fakeSystemd stands in for the host's systemd: it records every systemctl call and answers is-enabled
// from the .wants link that enable and disable manage, as systemctl does.
type fakeSystemd struct {
	dir   string
	calls []string
	// state, when set, is what is-enabled answers instead ("masked").
	state string
	// fail makes the named verb fail.
	fail string
}

func (f *fakeSystemd) systemctl(_ context.Context, args ...string) ([]byte, error) {
	f.calls = append(f.calls, strings.Join(args, " "))
	verb, unit := args[0], args[len(args)-1]
	link := filepath.Join(f.dir, WantedBy+".wants", unit)
	if verb == f.fail {
		return []byte("Failed to connect to bus"), errors.New("exit status 1")
	}
	switch verb {
	case "is-enabled":
		if f.state != "" {
			return []byte(f.state + "\n"), errors.New("exit status 1")
		}
		if _, err := os.Lstat(link); err == nil {
			return []byte("enabled\n"), nil
		}
		return []byte("disabled\n"), errors.New("exit status 1")
	case "enable":
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return nil, err
		}
		return nil, os.Symlink(filepath.Join(f.dir, unit), link)
	case "disable":
		return nil, os.Remove(link)
	}
	return nil, nil
}

func newManager(t *testing.T, systemd bool) (Manager, *fakeSystemd) {
	t.Helper()
	f := &fakeSystemd{dir: filepath.Join(t.TempDir(), "etc/systemd/system")}
	return Manager{Dir: f.dir, Systemctl: f.systemctl, Systemd: func() bool { return systemd }}, f
}

var unit = Unit{Machine: "yonder-n1", Argv: []string{"/usr/local/bin/yonder-agent", "bootstrap", "--config=/etc/yonder/agent-config.yaml"}}

func TestRenderRunsTheAgentsBootstrapAfterTheNetworkIsOnline(t *testing.T) {
	g := NewWithT(t)
	g.Expect(unit.Name()).To(Equal("yonder-node-yonder-n1.service"))
	got, err := unit.Render()
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(got, "\n")
	g.Expect(lines).To(ContainElements(
		"[Unit]", "Wants=network-online.target", "After=network-online.target",
		"[Service]", "Type=simple", "ExecStart=/usr/local/bin/yonder-agent bootstrap --config=/etc/yonder/agent-config.yaml",
		"Restart=on-failure", "RestartSec=30s",
		"[Install]", "WantedBy=multi-user.target"))
	g.Expect(got).To(ContainSubstring("Description=Yonder node yonder-n1"))
	g.Expect(got).To(HaveSuffix("\n"))

	for _, argv := range [][]string{nil, {"yonder-agent", "bootstrap"}, {"./yonder-agent", "bootstrap"}} {
		_, err := Unit{Machine: "m", Argv: argv}.Render()
		g.Expect(err).To(MatchError(ContainSubstring("absolute")), "%q: systemd starts the unit in /, not where the agent ran", argv)
	}
}

// Arguments reach the agent as they are: a path with a space stays one argument, % and $ are not
// systemd's specifiers or variables, and a control character is refused rather than written.
func TestExecStartQuotesWhatSystemdWouldInterpret(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"/usr/local/bin/yonder-agent", "/usr/local/bin/yonder-agent"},
		{"--pod-cidr=10.244.0.0/16", "--pod-cidr=10.244.0.0/16"},
		{"--sandbox-image=registry.k8s.io/pause:3.10", "--sandbox-image=registry.k8s.io/pause:3.10"},
		{"--config=/srv/my node/agent.yaml", `"--config=/srv/my node/agent.yaml"`},
		{"--config=/srv/100%/$HOME.yaml", "--config=/srv/100%%/$$HOME.yaml"},
		{`--config=/srv/a"b\c`, `"--config=/srv/a\"b\\c"`},
		{"--config=/srv/it's", `"--config=/srv/it's"`},
		{";", `";"`},
		{"", `""`},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(quote(tc.arg)).To(Equal(tc.want))
		})
	}
	g := NewWithT(t)
	_, err := Unit{Machine: "m", Argv: []string{"/bin/yonder-agent", "--config=/a\nExecStartPre=/bin/evil"}}.Render()
	g.Expect(err).To(MatchError(ContainSubstring("control character")))
}

// Install writes the unit once, atomically and 0644, reloads systemd and enables the unit; run again on
// a converged host it touches nothing and only asks whether the unit is enabled.
func TestInstallWritesEnablesOnceAndLeavesAnEqualUnitAlone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, f := newManager(t, true)
	res, err := m.Install(ctx, unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(Result{Written: true, Enabled: true}))
	g.Expect(f.calls).To(Equal([]string{"daemon-reload", "is-enabled yonder-node-yonder-n1.service", "enable yonder-node-yonder-n1.service"}))
	path := filepath.Join(f.dir, "yonder-node-yonder-n1.service")
	g.Expect(m.Path("yonder-n1")).To(Equal(path))
	st, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o644)))
	want, _ := unit.Render()
	g.Expect(os.ReadFile(path)).To(Equal([]byte(want)))
	g.Expect(os.ReadDir(f.dir)).To(HaveLen(2), "the unit and multi-user.target.wants, no temporary file")

	f.calls = nil
	res, err = m.Install(ctx, unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(Result{}))
	g.Expect(f.calls).To(Equal([]string{"is-enabled yonder-node-yonder-n1.service"}))
	again, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.SameFile(st, again)).To(BeTrue(), "an equal unit is not rewritten")
	g.Expect(again.ModTime()).To(Equal(st.ModTime()))

	// Another flag (or an agent moved elsewhere): rewritten in place and systemd reloaded; still enabled.
	f.calls = nil
	changed := Unit{Machine: unit.Machine, Argv: append(append([]string(nil), unit.Argv...), "--pod-cidr=10.244.0.0/16")}
	res, err = m.Install(ctx, changed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(Result{Written: true}))
	g.Expect(f.calls).To(Equal([]string{"daemon-reload", "is-enabled yonder-node-yonder-n1.service"}))
	g.Expect(os.ReadFile(path)).To(ContainSubstring("--pod-cidr=10.244.0.0/16"))

	// A unit whose mode someone changed is given its mode back.
	g.Expect(os.Chmod(path, 0o600)).To(Succeed())
	res, err = m.Install(ctx, changed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Written).To(BeTrue())
	st, err = os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Mode().Perm()).To(Equal(os.FileMode(0o644)))
}

// An operator who masked the unit keeps it masked; a failing systemctl fails the install, so the
// bootstrap says the node would not come back after a reboot.
func TestInstallRespectsAMaskAndReportsSystemctlFailures(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, f := newManager(t, true)
	f.state = "masked"
	res, err := m.Install(ctx, unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Masked).To(BeTrue())
	g.Expect(f.calls).NotTo(ContainElement(HavePrefix("enable")))

	m, f = newManager(t, true)
	f.fail = "enable"
	_, err = m.Install(ctx, unit)
	g.Expect(err).To(MatchError(And(ContainSubstring("systemctl enable yonder-node-yonder-n1.service failed"), ContainSubstring("Failed to connect to bus"))))
}

// Without systemd as PID 1 (containers, the test hosts) nothing is written and systemctl is never run;
// status reports nothing to see.
func TestNothingWithoutSystemd(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, f := newManager(t, false)
	res, err := m.Install(ctx, unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(Result{Skipped: true}))
	g.Expect(f.dir).NotTo(BeAnExistingFile())
	removed, err := m.Remove(ctx, "yonder-n1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(BeEmpty())
	g.Expect(m.Get(ctx, "yonder-n1")).To(Equal(Status{Name: "yonder-node-yonder-n1.service"}))
	g.Expect(f.calls).To(BeEmpty())

	// The default Manager has no systemd check and installs nothing either.
	res, err = Manager{Dir: f.dir}.Install(ctx, unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Skipped).To(BeTrue())
}

// Remove stops and disables the unit, removes its file and reloads systemd; run again it finds nothing
// and runs no systemctl. A wants link left by an interrupted remove (its file already gone) goes too.
func TestRemoveDisablesRemovesAndReloads(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, f := newManager(t, true)
	_, err := m.Install(ctx, unit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Get(ctx, "yonder-n1")).To(Equal(Status{Name: "yonder-node-yonder-n1.service", Installed: true, Enabled: "enabled"}))

	f.calls = nil
	removed, err := m.Remove(ctx, "yonder-n1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(Equal(m.Path("yonder-n1")))
	g.Expect(f.calls).To(Equal([]string{"disable --now yonder-node-yonder-n1.service", "daemon-reload"}))
	g.Expect(m.Path("yonder-n1")).NotTo(BeAnExistingFile())
	g.Expect(m.wantsLink("yonder-n1")).NotTo(BeAnExistingFile())

	f.calls = nil
	removed, err = m.Remove(ctx, "yonder-n1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(BeEmpty())
	g.Expect(f.calls).To(BeEmpty())

	// Another node's unit on the same host is not touched.
	other := Unit{Machine: "yonder-n2", Argv: unit.Argv}
	_, err = m.Install(ctx, other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.Symlink(m.Path("yonder-n1"), m.wantsLink("yonder-n1"))).To(Succeed())
	f.calls = nil
	removed, err = m.Remove(ctx, "yonder-n1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).NotTo(BeEmpty())
	g.Expect(f.calls).To(Equal([]string{"daemon-reload"}), "disable needs the unit's file; the link is removed directly")
	_, err = os.Lstat(m.wantsLink("yonder-n1"))
	g.Expect(err).To(MatchError(os.ErrNotExist))
	g.Expect(m.Path("yonder-n2")).To(BeAnExistingFile())
	g.Expect(m.wantsLink("yonder-n2")).To(BeAnExistingFile())
}
