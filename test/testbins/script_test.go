package testbins_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/testbins"
)

// The install logic of hack/test-bins.sh, run for real against stand-ins for dpkg-query, apt-get, id and go
// on PATH that record how they were called: no package is installed and nothing is built. A machine that ran
// CI before has every package, so only these tests (or an empty machine) see the fresh-machine paths.

// dpkgQueryStandIn answers `dpkg-query -W -f=… PKG…` like the real one: a line per known package, "no
// packages found" on stderr and exit status 1 when any is unknown.
const dpkgQueryStandIn = `#!/bin/sh
echo "dpkg-query $*" >>"$STUB_STATE/calls"
shift 2
rc=0
for p in "$@"; do
  if grep -qx "$p" "$STUB_STATE/installed" 2>/dev/null; then echo "$p install ok installed"
  elif grep -qx "$p" "$STUB_STATE/removed" 2>/dev/null; then echo "$p deinstall ok config-files"
  else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
done
exit $rc
`

// aptGetStandIn records its arguments; install "installs" by adding the packages to the installed list.
const aptGetStandIn = `#!/bin/sh
echo "apt-get $*" >>"$STUB_STATE/calls"
case "$1" in
update)
  if [ -e "$STUB_STATE/fail-update" ]; then echo "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Could not resolve 'deb.debian.org'" >&2; exit 100; fi ;;
install)
  # What a package's maintainer script asks before it starts its daemon (invoke-rc.d's policy-rc.d protocol).
  if [ -x "$YONDER_POLICY_RC_D" ]; then "$YONDER_POLICY_RC_D" nginx start; echo "policy-rc.d $?" >>"$STUB_STATE/calls"; fi
  if [ -e "$STUB_STATE/fail-install" ]; then echo "E: Unable to locate package kea-admin" >&2; exit 100; fi
  for a in "$@"; do case "$a" in -*|install) ;; *) echo "$a" >>"$STUB_STATE/installed" ;; esac; done ;;
esac
exit 0
`

const idStandIn = `#!/bin/sh
cat "$STUB_STATE/uid"
`

// goStandIn reports a Go version and fails `go mod init`, the first command of every component build.
const goStandIn = `#!/bin/sh
echo "go $*" >>"$STUB_STATE/calls"
case "$1 $2" in
"env GOVERSION") cat "$STUB_STATE/goversion" ;;
"mod init") echo "go: simulated failure: proxy.golang.org: connection refused" >&2; exit 1 ;;
*) exit 0 ;;
esac
`

type scriptEnv struct {
	t     *testing.T
	state string
	env   []string
}

func newScriptEnv(t *testing.T, packages string, installed ...string) *scriptEnv {
	t.Helper()
	dir := t.TempDir()
	bin, state := filepath.Join(dir, "bin"), filepath.Join(dir, "state")
	for _, d := range []string{bin, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"dpkg-query": dpkgQueryStandIn, "apt-get": aptGetStandIn, "id": idStandIn, "go": goStandIn} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := &scriptEnv{t: t, state: state, env: []string{
		"PATH=" + bin + ":/usr/bin:/bin:/usr/sbin:/sbin",
		"HOME=" + dir,
		"STUB_STATE=" + state,
		"YONDER_CACHE_DIR=" + filepath.Join(dir, "cache"),
		"YONDER_DEB_PACKAGES=" + packages,
		"YONDER_MIN_FREE_GIB=0",
		"YONDER_POLICY_RC_D=" + filepath.Join(dir, "policy-rc.d"),
	}}
	e.write("installed", strings.Join(installed, "\n")+"\n")
	e.write("uid", "0\n")
	e.write("goversion", "go1.26.8\n")
	return e
}

func (e *scriptEnv) write(name, text string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.state, name), []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// run runs hack/test-bins.sh with args; it returns stderr and the exit status.
func (e *scriptEnv) run(args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(testbins.RepoRoot(), "hack", "test-bins.sh")}, args...)...)
	cmd.Env = e.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("hack/test-bins.sh %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	return stderr.String(), code
}

// calls returns the recorded calls of one stand-in.
func (e *scriptEnv) calls(prefix string) []string {
	b, _ := os.ReadFile(filepath.Join(e.state, "calls"))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, prefix+" ") {
			out = append(out, l)
		}
	}
	return out
}

func TestPackagesInstallsExactlyTheMissingOnes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		installed []string
		removed   string
		want      []string // apt-get calls
	}{
		{name: "some missing, one removed with its config left", installed: []string{"pkg-a", "pkg-c"}, removed: "pkg-d\n",
			want: []string{"apt-get update -q", "apt-get install -y -q --no-install-recommends pkg-b pkg-d"}},
		{name: "none installed", want: []string{"apt-get update -q", "apt-get install -y -q --no-install-recommends pkg-a pkg-b pkg-c pkg-d"}},
		{name: "all installed", installed: []string{"pkg-a", "pkg-b", "pkg-c", "pkg-d"}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newScriptEnv(t, "pkg-a pkg-b pkg-c pkg-d", tc.installed...)
			e.write("removed", tc.removed)
			stderr, code := e.run("--packages")
			g.Expect(code).To(Equal(0), stderr)
			g.Expect(e.calls("apt-get")).To(Equal(tc.want))
			g.Expect(e.calls("dpkg-query")).NotTo(BeEmpty())
		})
	}
}

func TestPackagesInstallFailureSaysWhichStep(t *testing.T) {
	for _, tc := range []struct {
		fail, step, why string
	}{
		{"fail-install", "apt-install", "E: Unable to locate package kea-admin"},
		{"fail-update", "apt-update", "Could not resolve 'deb.debian.org'"},
	} {
		t.Run(tc.step, func(t *testing.T) {
			g := NewWithT(t)
			e := newScriptEnv(t, "pkg-a pkg-b", "pkg-a")
			e.write(tc.fail, "")
			stderr, code := e.run("--packages")
			g.Expect(code).NotTo(Equal(0))
			g.Expect(stderr).To(ContainSubstring("FAILED: step '" + tc.step + "'"))
			g.Expect(stderr).To(MatchRegexp(`hack/test-bins.sh line [0-9]+, exit status 100`))
			g.Expect(stderr).To(ContainSubstring("the step ran: env DEBIAN_FRONTEND=noninteractive apt-get"))
			g.Expect(stderr).To(ContainSubstring(tc.why), "the tail of the step's output")
			g.Expect(stderr).NotTo(ContainSubstring("installed 1 Debian packages"))
		})
	}
}

// While packages install, no daemon may start (nginx and tftpd-hpa would hold :80 and :69): the script
// writes a policy-rc.d that refuses (exit 101) when the machine has none, and removes it afterwards, also
// when the install fails; a policy the machine has is left as it is.
func TestPackagesInstallStartsNoDaemons(t *testing.T) {
	for _, tc := range []struct {
		name         string
		failInstall  bool
		machineHasIt bool
	}{{name: "install succeeds"}, {name: "install fails", failInstall: true}, {name: "the machine has a policy", machineHasIt: true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newScriptEnv(t, "pkg-a nginx", "pkg-a")
			policy := strings.TrimPrefix(e.env[len(e.env)-1], "YONDER_POLICY_RC_D=")
			own := "#!/bin/sh\nexit 0\n"
			if tc.machineHasIt {
				g.Expect(os.WriteFile(policy, []byte(own), 0o755)).To(Succeed())
			}
			if tc.failInstall {
				e.write("fail-install", "")
			}
			stderr, code := e.run("--packages")
			g.Expect(code == 0).To(Equal(!tc.failInstall), stderr)
			want := "policy-rc.d 101"
			if tc.machineHasIt {
				want = "policy-rc.d 0"
			}
			g.Expect(e.calls("policy-rc.d")).To(Equal([]string{want}))
			if tc.machineHasIt {
				g.Expect(os.ReadFile(policy)).To(Equal([]byte(own)))
			} else {
				g.Expect(policy).NotTo(BeAnExistingFile())
			}
		})
	}
}

func TestPackagesAsNonRootSaysWhatToRun(t *testing.T) {
	g := NewWithT(t)
	e := newScriptEnv(t, "pkg-a pkg-b", "pkg-a")
	e.write("uid", "1000\n")
	stderr, code := e.run("--packages")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(ContainSubstring("missing Debian packages: pkg-b — run: sudo apt-get install -y pkg-b"))
	g.Expect(e.calls("apt-get")).To(BeEmpty())
}

func TestPreflightSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(e *scriptEnv)
		want   string
	}{
		{"not root", func(e *scriptEnv) { e.write("uid", "1000\n") }, "run as root"},
		{"old Go", func(e *scriptEnv) { e.write("goversion", "go1.22.4\n") }, "Go 1.22.4 is too old: go.mod needs Go 1.26"},
		{"no room", func(e *scriptEnv) { e.env = append(e.env, "YONDER_MIN_FREE_GIB=1000000") }, "GiB free on the filesystem of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			e := newScriptEnv(t, "pkg-a", "pkg-a")
			tc.change(e)
			stderr, code := e.run("--preflight")
			g.Expect(code).To(Equal(1))
			g.Expect(stderr).To(ContainSubstring("ERROR: "))
			g.Expect(stderr).To(ContainSubstring(tc.want))
			// The full run stops at the same check, before it installs or builds anything.
			stderr, code = e.run()
			g.Expect(code).To(Equal(1))
			g.Expect(stderr).To(ContainSubstring(tc.want))
			g.Expect(e.calls("apt-get")).To(BeEmpty())
			g.Expect(e.calls("go mod")).To(BeEmpty())
		})
	}
	g := NewWithT(t)
	stderr, code := newScriptEnv(t, "pkg-a", "pkg-a").run("--preflight")
	g.Expect(code).To(Equal(0), stderr)
}

// TestFailingBuildStepNamesItself: a component build that fails (here `go mod init`, as when the module proxy
// is unreachable) names its step, line and command, and shows the end of its output, which is kept in the
// step's log.
func TestFailingBuildStepNamesItself(t *testing.T) {
	g := NewWithT(t)
	e := newScriptEnv(t, "pkg-a", "pkg-a")
	stderr, code := e.run()
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(MatchRegexp(`FAILED: step 'build-etcd', hack/test-bins.sh line [0-9]+, exit status 1: go mod init yonder.local/etcdbin`))
	g.Expect(stderr).To(ContainSubstring("go: simulated failure: proxy.golang.org: connection refused"))
	g.Expect(strings.Count(stderr, "FAILED:")).To(Equal(1), "reported once, not once per enclosing function")
	logFile := filepath.Join(strings.TrimPrefix(e.env[3], "YONDER_CACHE_DIR="), "logs", "build-etcd.log")
	g.Expect(os.ReadFile(logFile)).To(ContainSubstring("simulated failure"))
	g.Expect(e.calls("apt-get")).To(BeEmpty(), "every package was installed")
}

func TestUnknownArgumentIsRefused(t *testing.T) {
	g := NewWithT(t)
	stderr, code := newScriptEnv(t, "pkg-a", "pkg-a").run("--rootsf")
	g.Expect(code).To(Equal(2))
	g.Expect(stderr).To(ContainSubstring("unknown argument --rootsf"))
}
