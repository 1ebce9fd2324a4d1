package docpage

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
)

const testPage = "test/docpage/testdata/page.md"

func TestReadFindsVariablesSectionsAndBlocks(t *testing.T) {
	g := NewWithT(t)
	p, err := Read(testPage)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Variables).To(Equal([]string{"GREETING", "NAME", "PLACE"}))
	g.Expect(p.Outline()).To(Equal([]string{"1. Export (1 shell blocks)", "2. Use (2 shell blocks)", "3. No blocks (0 shell blocks)"}))
	s, err := p.Section("2. Use")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Blocks[1]).To(Equal("false\necho never\n"))
	_, err = p.Section("4. Missing")
	g.Expect(err).To(MatchError(ContainSubstring(`has no section "4. Missing"`)))
	g.Expect(p.Documents("NAME", "PLACE")).To(Succeed())
	g.Expect(p.Documents("NAME", "KUBECONFIG")).To(MatchError(ContainSubstring("does not document [KUBECONFIG]")))

	_, err = Read("test/docpage/testdata/early.md")
	g.Expect(err).To(MatchError(ContainSubstring("shell block before its first section")))
}

// Blocks share one session (an export reaches the next block), see only the variables given (not the
// test's own environment), refuse a variable the page does not document, and a failing command fails the
// block at once (errexit).
func TestShellRunsBlocksInOneSessionWithOnlyTheGivenVariables(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	t.Setenv("DOCPAGE_TEST_SECRET", "from the test's environment")
	p, err := Read(testPage)
	g.Expect(err).NotTo(HaveOccurred())
	sh := NewShell(t, p, map[string]string{"GREETING": "hello", "NAME": "it's me"})
	export, _ := p.Section("1. Export")
	use, _ := p.Section("2. Use")

	sh.RunBlock(ctx, t, export.Blocks[0], nil)
	g.Expect(sh.RunBlock(ctx, t, use.Blocks[0], map[string]string{"PLACE": "home"})).To(Equal("hello, it's me at home; test env: unset\n"))

	_, _, err = sh.ExecBlock(ctx, use.Blocks[0], map[string]string{"UNDOCUMENTED": "x"})
	g.Expect(err).To(MatchError(ContainSubstring("does not document [UNDOCUMENTED]")))
	out, _, err := sh.ExecBlock(ctx, use.Blocks[1], nil)
	g.Expect(err).To(HaveOccurred())
	g.Expect(out).NotTo(ContainSubstring("never"))
}
