// Package docpage runs a documentation page's shell blocks as a reader follows them, so that a page and
// the test that runs it cannot drift apart: Read parses a Markdown page into its variables table and its
// sections with their ```sh blocks; a Shell runs blocks in one shell session from the repository root,
// with nothing set but the variables the caller passes (which the page's table must name) and the user's
// PATH, HOME, locale, proxy and Go settings.
package docpage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/testbins"
)

// Page is a parsed page.
type Page struct {
	// Path is the page's path relative to the repository root.
	Path string
	// Variables are the backticked names in the first cell of each row of the table before the first
	// section: what a reader sets.
	Variables []string
	// Sections are the page's `## ` sections in order.
	Sections []Section
}

// Section is one `## ` section: its heading (without the hashes) and its shell blocks in order.
type Section struct {
	Heading string
	Blocks  []string
}

// variableCell is a backticked name in a table row's first cell.
var variableCell = regexp.MustCompile("`([A-Z_][A-Z0-9_]*)`")

// Read parses the page at path (relative to the repository root): `## ` headings open sections, ```sh
// fences open shell blocks, and the table before the first section names the variables.
func Read(path string) (*Page, error) {
	data, err := os.ReadFile(filepath.Join(testbins.RepoRoot(), path)) //nolint:gosec // a page of this repository
	if err != nil {
		return nil, err
	}
	p := &Page{Path: path}
	var block *strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block != nil && line == "```":
			s := &p.Sections[len(p.Sections)-1]
			s.Blocks = append(s.Blocks, block.String())
			block = nil
		case block != nil:
			block.WriteString(line + "\n")
		case line == "```sh":
			if len(p.Sections) == 0 {
				return nil, fmt.Errorf("%s has a shell block before its first section", path)
			}
			block = &strings.Builder{}
		case strings.HasPrefix(line, "## "):
			p.Sections = append(p.Sections, Section{Heading: strings.TrimPrefix(line, "## ")})
		case len(p.Sections) == 0 && strings.HasPrefix(line, "| `"):
			first := strings.SplitN(line, "|", 3)[1]
			for _, m := range variableCell.FindAllStringSubmatch(first, -1) {
				p.Variables = append(p.Variables, m[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if block != nil {
		return nil, fmt.Errorf("%s: a shell block is not closed", path)
	}
	return p, nil
}

// Outline is one line per section: its heading and how many shell blocks it has. A test compares it with
// the outline it knows, so a section or block added, removed or renamed fails it.
func (p *Page) Outline() []string {
	var out []string
	for _, s := range p.Sections {
		out = append(out, OutlineLine(s.Heading, len(s.Blocks)))
	}
	return out
}

// OutlineLine is Outline's line for a section with heading and blocks shell blocks.
func OutlineLine(heading string, blocks int) string {
	return fmt.Sprintf("%s (%d shell blocks)", heading, blocks)
}

// Section returns the section with heading, or an error naming the page's headings.
func (p *Page) Section(heading string) (Section, error) {
	var headings []string
	for _, s := range p.Sections {
		if s.Heading == heading {
			return s, nil
		}
		headings = append(headings, s.Heading)
	}
	return Section{}, fmt.Errorf("%s has no section %q (it has %q)", p.Path, heading, headings)
}

// Documents returns an error naming every name the page's table does not document.
func (p *Page) Documents(names ...string) error {
	var missing []string
	for _, n := range names {
		if !slices.Contains(p.Variables, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("%s does not document %v in its table of variables", p.Path, missing)
	}
	return nil
}

// Shell runs a page's blocks in one shell session (its methods are RunBlock and ExecBlock, not Run and Exec:
// test/testbins' command scan resolves x.Run(…) and x.Exec(…) calls by name, and helpers that pass their
// *testing.T second to a Run would be taken for command runners): each block in its own bash (errexit, nounset,
// pipefail), which first reads what the blocks before it exported and at its end saves what it exports.
type Shell struct {
	page    *Page
	envFile string
}

// NewShell starts a session for page with vars set, which the page's table must document: the user's
// PATH (with the test binaries' clusterctl and kubectl, and go), HOME, locale, proxy and Go settings, and
// vars — nothing else of the test's environment.
func NewShell(t *testing.T, page *Page, vars map[string]string) *Shell {
	t.Helper()
	if err := page.Documents(keys(vars)...); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, bin := range []string{"clusterctl", "kubectl"} {
		p, err := testbins.Path(bin)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PATH": strings.Join(append(dirs, filepath.Dir(goBin), os.Getenv("PATH")), ":")}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME", k == "USER", k == "LANG", k == "TMPDIR", strings.HasPrefix(k, "LC_"),
			strings.HasPrefix(k, "GO"), strings.EqualFold(k, "http_proxy"), strings.EqualFold(k, "https_proxy"), strings.EqualFold(k, "no_proxy"):
			env[k] = v
		}
	}
	for k, v := range vars {
		env[k] = v
	}
	s := &Shell{page: page, envFile: filepath.Join(t.TempDir(), "env")}
	if err := os.WriteFile(s.envFile, []byte(exports(env)), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// RunBlock runs block (ExecBlock) and returns its output, which it logs; the test fails when the block does.
func (s *Shell) RunBlock(ctx context.Context, t *testing.T, block string, extra map[string]string) string {
	t.Helper()
	out, took, err := s.ExecBlock(ctx, block, extra)
	t.Logf("$ %s(%s)\n%s", strings.ReplaceAll(block, "\n", "\n  "), took.Round(time.Millisecond), tail(out, 40))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ExecBlock runs block from the repository root with extra exported first (names the page's table must
// document), within 10 minutes, and returns its output (stdout and stderr) and how long it took.
func (s *Shell) ExecBlock(ctx context.Context, block string, extra map[string]string) (string, time.Duration, error) {
	if err := s.page.Documents(keys(extra)...); err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	script := "set -euo pipefail\nsource " + shellQuote(s.envFile) + "\n" + exports(extra) + block + "export -p > " + shellQuote(s.envFile) + "\n"
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = testbins.RepoRoot()
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return out.String(), time.Since(t0), fmt.Errorf("a shell block of %s failed: %w", s.page.Path, err)
	}
	return out.String(), time.Since(t0), nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// exports writes env as bash export lines, sorted.
func exports(env map[string]string) string {
	var b strings.Builder
	for _, k := range keys(env) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
