package sshexec

import (
	"bytes"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestWrapSudo(t *testing.T) {
	g := NewWithT(t)
	cmd, in := WrapSudo("root", nil, "echo 'x'", nil)
	g.Expect(cmd).To(Equal("echo 'x'"))
	g.Expect(in).To(BeNil())

	cmd, _ = WrapSudo("ops", nil, "echo 'x'", nil)
	g.Expect(cmd).To(Equal(`sudo -n -- sh -c 'echo '\''x'\'''`))

	cmd, in = WrapSudo("ops", []byte("s3cret"), "cat > f", strings.NewReader("data"))
	g.Expect(cmd).To(Equal(`sudo -S -p '' -- sh -c 'cat > f'`))
	b, _ := io.ReadAll(in)
	g.Expect(string(b)).To(Equal("s3cret\ndata"), "the password is the first line sudo reads, then the command's stdin")
	g.Expect(cmd).NotTo(ContainSubstring("s3cret"), "the password never appears on a command line")
}

func TestLimitedBufferDropsOverflow(t *testing.T) {
	g := NewWithT(t)
	lb := &limitedBuffer{b: new(bytes.Buffer), max: 4}
	n, err := lb.Write([]byte("abcdef"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(6))
	g.Expect(lb.b.String()).To(Equal("abcd"))
}
