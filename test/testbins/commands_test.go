package testbins_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/testbins"
)

// repoScripts are the repository's shell scripts; TestRepoScriptsAreListed keeps the list complete.
var repoScripts = []string{".ci/run", "hack/fuzz.sh", "hack/release-repo.sh", "hack/test-bins.sh", "hack/test.sh", "templates/generate.sh"}

func TestShellCommandsScanner(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   []string
	}{
		{"find . | cpio -o -H newc --quiet | gzip -1 > initrd", []string{"find", "cpio", "gzip"}},
		{"a=1 b=2 ip link show; echo 'cpio | x' && mkfs.ext4 -d dir img 2>&1", []string{"ip", "mkfs.ext4"}},
		{"x=$(sfdisk --dump img | awk '{print $1}')\nnsenter --net=/run/netns/n -- busybox udhcpc", []string{"sfdisk", "awk", "nsenter", "busybox"}},
		{"log() { echo \"$*\"; }\nlog hi\ncase $1 in\n  --a) tar -xf x ;;\n  *.xz) xz -dc f ;;\nesac", []string{"tar", "xz"}},
		{"cat > f <<'EOF'\nqemu-img convert\nEOF\nzstd -q f", []string{"cat", "zstd"}},
		{"timeout 5 env A=b curl -s \"$(hostname -f)\" # wget here is a comment", []string{"timeout", "env", "curl", "hostname"}},
		{"if command -v yonder-agent >/dev/null; then yonder-agent reset; fi", []string{"yonder-agent", "yonder-agent"}},
		{"while read -r l; do :; done < <(dpkg-query -W x)", []string{"dpkg-query"}},
		{"echo $((1 + 2)) | sha256sum", []string{"sha256sum"}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			NewWithT(t).Expect(shellCommands(tc.script)).To(Equal(tc.want))
		})
	}
}

// ownBinaries are built from this repository by the tests themselves (stack, metalboot, lab), not installed.
var ownBinaries = regexp.MustCompile(`^(yonder-[a-z-]+|kubectl-yonder)$`)

// probedFirst are commands that scripts run only after `command -v` found them: the product's host facts
// probe (infrastructure-ssh's remote.go) reports GPUs where a host has the tools, and takes the other branch
// where it has not, as on this machine. Each entry says why it need not be installed.
var probedFirst = map[string]string{
	"nvidia-smi": "GPU facts on NVIDIA hosts; needs a GPU driver, not a package of these tests",
	"lspci":      "GPU facts on hosts with pciutils; the facts probe tolerates its absence",
}

// TestEveryCommandIsAccountedFor finds every external command the Go code and the repository's scripts run
// on this machine and checks that each comes from a package in DEB_PACKAGES (or one every Debian has), a
// binary hack/test-bins.sh builds, or the Go toolchain: a fresh machine then has all of them once
// hack/test-bins.sh ran, and none can be missing only there.
func TestEveryCommandIsAccountedFor(t *testing.T) {
	g := NewWithT(t)
	root := testbins.RepoRoot()
	uses, _, err := scanGoTree(root)
	g.Expect(err).NotTo(HaveOccurred())
	scripts, err := readScripts(root, repoScripts)
	g.Expect(err).NotTo(HaveOccurred())
	for p, text := range scripts {
		for _, c := range shellCommands(text) {
			uses = append(uses, commandUse{c, p})
		}
	}
	where := map[string][]string{}
	for _, u := range uses {
		where[u.name] = append(where[u.name], u.where)
	}
	g.Expect(where).To(HaveKey("ip"), "the scanner finds the commands the code runs")
	names := make([]string, 0, len(where))
	for n := range where {
		names = append(names, n)
	}
	sort.Strings(names)
	var problems, found []string
	for _, n := range names {
		if ownBinaries.MatchString(n) {
			continue
		}
		if why, ok := probedFirst[n]; ok {
			found = append(found, n+" ("+why+")")
			continue
		}
		src, err := testbins.CommandSource(n)
		if err != nil {
			w := where[n]
			if len(w) > 3 {
				w = append(w[:3:3], fmt.Sprintf("… %d more", len(where[n])-3))
			}
			problems = append(problems, fmt.Sprintf("%s (run at %s): %v", n, strings.Join(w, ", "), err))
			continue
		}
		found = append(found, n+"="+src)
	}
	t.Logf("%d commands: %s", len(found), strings.Join(found, " "))
	g.Expect(problems).To(BeEmpty(), "every command must come from DEB_PACKAGES, hack/test-bins.sh or Go")
}

// TestEveryDebPackageIsInstalled: what hack/test-bins.sh installs is there (it ran before the tests).
func TestEveryDebPackageIsInstalled(t *testing.T) {
	g := NewWithT(t)
	debs, err := testbins.DebPackages()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(debs).To(HaveKey("openssh-server"))
	var missing []string
	for p := range debs {
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok installed") {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	g.Expect(missing).To(BeEmpty(), "run hack/test-bins.sh --packages")
}

// TestShellPipelinesFailOnAnyStage: a pipeline's status is its last command's, so `find | cpio | gzip` with
// cpio missing "succeeded". Every script the code runs through a shell must see a failure in any stage:
// `sh -c` (dash, which has no pipefail) runs no pipelines, `bash -c` runs them with -o pipefail, and the
// repository's scripts set pipefail.
func TestShellPipelinesFailOnAnyStage(t *testing.T) {
	g := NewWithT(t)
	root := testbins.RepoRoot()
	_, shellsRun, err := scanGoTree(root)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shellsRun).To(ContainElement(HaveField("Where", HavePrefix("test/hosts/hosts.go:"))), "the scanner finds the literal scripts the code runs")
	var problems []string
	for _, s := range shellsRun {
		if !hasPipeline(s.Text) {
			continue
		}
		pipefail := strings.Contains(s.Flags, "pipefail") || regexp.MustCompile(`^\s*set -[a-z]*o pipefail`).MatchString(s.Text)
		if !strings.HasSuffix(s.Shell, "bash") || !pipefail {
			problems = append(problems, fmt.Sprintf("%s: %s -c %q has a pipeline without pipefail: run it with bash -o pipefail -c, or connect the commands in Go", s.Where, s.Shell, s.Text))
		}
	}
	scripts, err := readScripts(root, repoScripts)
	g.Expect(err).NotTo(HaveOccurred())
	for p, text := range scripts {
		if !regexp.MustCompile(`(?m)^set -[A-Za-z]*o pipefail`).MatchString(text) {
			problems = append(problems, p+": sets no pipefail (set -euo pipefail)")
		}
	}
	g.Expect(problems).To(BeEmpty())
}

// hasPipeline reports a `|` outside quotes that is not part of `||`.
func hasPipeline(script string) bool {
	var q rune
	rs := []rune(script)
	for i, c := range rs {
		switch {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '|' && (i == 0 || rs[i-1] != '|') && (i+1 == len(rs) || rs[i+1] != '|'):
			return true
		}
	}
	return false
}

// TestRepoScriptsAreListed keeps repoScripts in step with the scripts in the repository.
func TestRepoScriptsAreListed(t *testing.T) {
	g := NewWithT(t)
	out, err := exec.Command("git", "-C", testbins.RepoRoot(), "ls-files").Output()
	g.Expect(err).NotTo(HaveOccurred())
	var got []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, ".sh") || f == ".ci/run" {
			got = append(got, f)
		}
	}
	sort.Strings(got)
	g.Expect(got).To(Equal(repoScripts))
}

// TestNoTestReadsOutsideTheRepository: a newcomer's clone has nothing beside it, so no code names a path
// that leaves the repository (../shared/fixtures once did).
func TestNoTestReadsOutsideTheRepository(t *testing.T) {
	g := NewWithT(t)
	root := testbins.RepoRoot()
	fset := token.NewFileSet()
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			if d != nil && d.IsDir() && err == nil {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		ast.Inspect(f, func(n ast.Node) bool {
			switch v := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(v.Value); err == nil && v.Kind == token.STRING && strings.Contains(s, outside) {
					problems = append(problems, fmt.Sprintf("%s: %q", fset.Position(v.Pos()), s))
				}
			case *ast.CallExpr:
				if sel, ok := v.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Join" {
					if p, ok := literalPath(v.Args); ok && strings.HasPrefix(p, "..") {
						abs := filepath.Join(dir, p)
						if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
							problems = append(problems, fmt.Sprintf("%s: %s leaves the repository", fset.Position(v.Pos()), p))
						}
					}
				}
			}
			return true
		})
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(problems).To(BeEmpty(), "test data belongs in the repository (testdata/ or test/fixtures/)")
}

// outside is the folder beside the checkout that development machines have and a fresh clone does not.
const outside = ".." + "/shared"

// literalPath joins the leading string literals of filepath.Join's arguments.
func literalPath(args []ast.Expr) (string, bool) {
	var parts []string
	for _, a := range args {
		lit, ok := a.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			break
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return "", false
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "", false
	}
	return filepath.Join(parts...), true
}
