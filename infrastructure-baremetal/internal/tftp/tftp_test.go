package tftp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	tftplib "github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/tftp"
	"github.com/yonder-dev/yonder/test/labnet"
)

// serve starts a server with cfg on addr until the test ends and returns its address.
func serve(t testing.TB, cfg tftp.Config, addr string, metrics *tftp.Metrics) *net.UDPAddr {
	t.Helper()
	srv, err := tftp.New(cfg, logr.Discard(), metrics)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, conn) }()
	t.Cleanup(func() { cancel(); <-done; _ = srv.Close() })
	return conn.LocalAddr().(*net.UDPAddr)
}

func TestRealTFTPClients(t *testing.T) {
	ctx := context.Background()
	n := labnet.NewForTest(t)
	client, err := n.Attach(ctx, "tftpc")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	dir := t.TempDir()
	payload := make([]byte, 3*1024*1024+17) // not a multiple of any block size
	_, _ = rand.Read(payload)
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "undionly.kpxe"), payload, 0o644)).To(Succeed())
	NewWithT(t).Expect(os.MkdirAll(filepath.Join(dir, "efi"), 0o755)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(filepath.Join(dir, "efi", "ipxe.efi"), payload[:4096], 0o644)).To(Succeed())
	secret := filepath.Join(t.TempDir(), "secret")
	NewWithT(t).Expect(os.WriteFile(secret, []byte("outside the root"), 0o600)).To(Succeed())
	NewWithT(t).Expect(os.Symlink(secret, filepath.Join(dir, "escape"))).To(Succeed())

	metrics := tftp.NewMetrics(prometheus.NewRegistry())
	addr := serve(t, tftp.Config{Root: dir, Timeout: 500 * time.Millisecond}, n.Gateway.String()+":69", metrics)
	gw := addr.IP.String()
	want := sha256.Sum256(payload)
	out := t.TempDir()

	inNS := func(args ...string) *exec.Cmd {
		c := exec.Command("nsenter", append([]string{"--net=" + client.NamespacePath}, args...)...)
		c.Dir = out
		return c
	}
	cases := tftpClients(inNS, gw, len(payload))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dst := filepath.Join(out, fmt.Sprintf("got-%d", i))
			b, err := tc.cmd(dst).CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), string(b))
			got, err := os.ReadFile(dst)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(HaveLen(tc.size))
			if tc.size == len(payload) {
				g.Expect(sha256.Sum256(got)).To(Equal(want))
			} else {
				g.Expect(got).To(Equal(payload[:tc.size]))
			}
		})
	}

	t.Run("size probe answered with tsize, then aborted as UEFI firmware does", func(t *testing.T) {
		checkSizeProbe(t, addr, len(payload))
		NewWithT(t).Eventually(func() float64 { return testutil.ToFloat64(metrics.Transfers.WithLabelValues("aborted")) }).
			WithTimeout(10 * time.Second).Should(Equal(1.0))
	})
	t.Run("netascii: tftp-hpa's ascii mode gets the text back as it was", func(t *testing.T) {
		g := NewWithT(t)
		text := "#!ipxe\r\nchain http://10.0.0.1/boot.ipxe\nbare\rcarriage return\n"
		g.Expect(os.WriteFile(filepath.Join(dir, "boot.txt"), []byte(text), 0o644)).To(Succeed())
		dst := filepath.Join(out, "boot.txt")
		c := inNS("tftp", gw)
		c.Stdin = strings.NewReader("ascii\nget boot.txt " + dst + "\nquit\n")
		b, err := c.CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(b))
		got, err := os.ReadFile(dst)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal(text))
	})
	checkRefusals(t, inNS, gw, out, dir)
	g := NewWithT(t)
	g.Expect(testutil.ToFloat64(metrics.Transfers.WithLabelValues("ok"))).To(BeNumerically(">=", 7))
	g.Expect(testutil.ToFloat64(metrics.Transfers.WithLabelValues("refused"))).To(BeNumerically(">=", 3))
}

// tftpClient is a real TFTP client's download of a file of size bytes to dst.
type tftpClient struct {
	name string
	cmd  func(dst string) *exec.Cmd
	size int
}

// tftpClients are the clients a boot network meets: busybox (default and large blocks), tftp-hpa with
// tsize and blksize, curl, and firmware's backslash paths; inNS runs a command in the client's namespace.
func tftpClients(inNS func(args ...string) *exec.Cmd, gw string, size int) []tftpClient {
	return []tftpClient{
		{name: "busybox tftp, default 512-byte blocks", size: size,
			cmd: func(dst string) *exec.Cmd { return inNS("busybox", "tftp", "-g", "-r", "undionly.kpxe", "-l", dst, gw) }},
		{name: "busybox tftp, blksize 1428", size: size,
			cmd: func(dst string) *exec.Cmd {
				return inNS("busybox", "tftp", "-b", "1428", "-g", "-r", "/undionly.kpxe", "-l", dst, gw)
			}},
		{name: "tftp-hpa with tsize and blksize", size: size,
			cmd: func(dst string) *exec.Cmd {
				c := inNS("tftp", "-v", gw)
				c.Stdin = strings.NewReader("binary\ntsize\nblksize 1468\nget undionly.kpxe " + dst + "\nquit\n")
				return c
			}},
		{name: "curl tftp:// (sends tsize + blksize)", size: size,
			cmd: func(dst string) *exec.Cmd {
				return inNS("curl", "-sS", "--fail", "--tftp-blksize", "1024", "-o", dst, "tftp://"+gw+"/undionly.kpxe")
			}},
		{name: "atftp with windowsize 8 (RFC 7440), blksize 1468 and tsize", size: size,
			cmd: func(dst string) *exec.Cmd {
				return inNS("atftp", "--option", "windowsize 8", "--option", "blksize 1468", "--option", "tsize enable",
					"-g", "-r", "undionly.kpxe", "-l", dst, gw)
			}},
		{name: "atftp with windowsize 64, default blocks", size: size,
			cmd: func(dst string) *exec.Cmd {
				return inNS("atftp", "--option", "windowsize 64", "-g", "-r", "undionly.kpxe", "-l", dst, gw)
			}},
		{name: "backslash path from firmware", size: 4096,
			cmd: func(dst string) *exec.Cmd { return inNS("busybox", "tftp", "-g", "-r", `efi\ipxe.efi`, "-l", dst, gw) }},
	}
}

// checkSizeProbe sends UEFI firmware's size probe (tsize, blksize) and aborts it as OVMF does.
func checkSizeProbe(t *testing.T, addr *net.UDPAddr, size int) {
	t.Helper()
	g := NewWithT(t)
	// Unconnected: the OACK comes from the transfer's own port, not port 69.
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: addr.IP})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = c.Close() }()
	_, err = c.WriteToUDP([]byte("\x00\x01undionly.kpxe\x00octet\x00tsize\x000\x00blksize\x001456\x00"), addr)
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, 1500)
	g.Expect(c.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
	n, from, err := c.ReadFromUDP(buf)
	g.Expect(err).NotTo(HaveOccurred())
	oack := string(buf[:n])
	g.Expect(oack).To(HavePrefix("\x00\x06"))
	g.Expect(oack).To(ContainSubstring(fmt.Sprintf("tsize\x00%d\x00", size)))
	g.Expect(oack).To(ContainSubstring("blksize\x001456\x00"))
	// Abort with error 8 (option negotiation), as OVMF does after its size probe.
	_, err = c.WriteToUDP([]byte("\x00\x05\x00\x08\x00"), from)
	g.Expect(err).NotTo(HaveOccurred())
}

// checkRefusals asserts that paths outside the root, symlinks out of it, directories and missing files
// are refused, and so are writes.
func checkRefusals(t *testing.T, inNS func(args ...string) *exec.Cmd, gw, out, dir string) {
	t.Helper()
	for _, name := range []string{"../../../../etc/passwd", "/../etc/passwd", "..\\..\\etc\\passwd", "escape", "efi", "missing"} {
		t.Run("refuses "+name, func(t *testing.T) {
			g := NewWithT(t)
			dst := filepath.Join(out, "refused")
			_ = os.Remove(dst)
			b, err := inNS("busybox", "tftp", "-g", "-r", name, "-l", dst, gw).CombinedOutput()
			g.Expect(err).To(HaveOccurred(), string(b))
			got, _ := os.ReadFile(dst)
			g.Expect(string(got)).NotTo(ContainSubstring("root:"))
			g.Expect(string(got)).NotTo(ContainSubstring("outside the root"))
		})
	}
	t.Run("writes are refused", func(t *testing.T) {
		g := NewWithT(t)
		src := filepath.Join(out, "upload")
		g.Expect(os.WriteFile(src, []byte("x"), 0o600)).To(Succeed())
		b, err := inNS("busybox", "tftp", "-p", "-l", src, "-r", "uploaded", gw).CombinedOutput()
		g.Expect(err).To(HaveOccurred(), string(b))
		g.Expect(filepath.Join(dir, "uploaded")).NotTo(BeAnExistingFile())
	})
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"undionly.kpxe": "undionly.kpxe", "/undionly.kpxe": "undionly.kpxe", `efi\ipxe.efi`: "efi/ipxe.efi",
		"a//b/./c": "a/b/c", "..": "", "a/../b": "", "/": "", "": "", "a\x00b": "",
	} {
		g := NewWithT(t)
		got, err := tftp.CleanPath(in)
		if want == "" {
			g.Expect(err).To(MatchError(tftp.ErrRefused), in)
			continue
		}
		g.Expect(err).NotTo(HaveOccurred(), in)
		g.Expect(got).To(Equal(want))
	}
}

// FuzzCleanPath: no accepted name is absolute or climbs out of the root.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"undionly.kpxe", "/ipxe.efi", `..\..\x`, "../etc/passwd", "a/./../b", "\x00", "....//", "/./.", strings.Repeat("a/", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := tftp.CleanPath(name)
		if err != nil {
			return
		}
		if filepath.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			t.Fatalf("CleanPath(%q) = %q escapes the root", name, p)
		}
	})
}

// FuzzRequestPacket sends arbitrary datagrams (malformed requests, option lists, stray ACKs) to a real
// server, then checks it still serves a normal request: bad packets never crash or wedge it.
func FuzzRequestPacket(f *testing.F) {
	rrq := func(name string, opts ...string) []byte {
		b := append([]byte{0, 1}, name...)
		b = append(b, 0)
		b = append(b, "octet\x00"...)
		for _, o := range opts {
			b = append(b, o...)
			b = append(b, 0)
		}
		return b
	}
	f.Add(rrq("ok"))
	f.Add(rrq("ok", "blksize", "65464", "tsize", "0", "windowsize", "16"))
	f.Add(rrq("ok", "blksize", "7", "tsize"))
	f.Add(rrq("../x", "blksize", "-1"))
	f.Add(rrq("ok", "blksize", "99999999999999999999"))
	f.Add([]byte{0, 2, 'x', 0, 'o', 'c', 't', 'e', 't', 0}) // write request
	f.Add([]byte{0, 4, 0, 1})                               // stray ACK
	f.Add([]byte{0, 5, 0, 0, 0})                            // error packet
	f.Add([]byte{0, 1})
	f.Add([]byte{})
	f.Add([]byte{0, 1, 'o', 'k'}) // no terminator

	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok"), bytes.Repeat([]byte("y"), 1500), 0o644); err != nil {
		f.Fatal(err)
	}
	addr := serve(f, tftp.Config{Root: dir, Timeout: 50 * time.Millisecond, Retries: 1}, "127.0.0.1:0", nil).String()
	client, err := tftplib.NewClient(addr)
	if err != nil {
		f.Fatal(err)
	}
	client.SetTimeout(time.Second)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("udp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		// Keep the sending socket open until the check is done: closed at once, its ephemeral port can be
		// handed to the client's next socket, which then reads the server's late answer to THIS packet.
		defer func() { _ = c.Close() }()
		_, _ = c.Write(data)
		wt, err := client.Receive("ok", "octet")
		if err != nil {
			t.Fatalf("server stopped serving after %q: %v", data, err)
		}
		var buf bytes.Buffer
		if n, err := wt.WriteTo(&buf); err != nil || n != 1500 {
			t.Fatalf("server stopped serving after %q: %d bytes, %v", data, n, err)
		}
	})
}

// TestConfiguredFiles: a configured name is served from its path (Debian's ipxe.efi is a symlink out of
// /usr/lib/ipxe), while the same kind of symlink requested by name through the root stays refused.
func TestConfiguredFiles(t *testing.T) {
	g := NewWithT(t)
	dir, outside := t.TempDir(), t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, "ipxe.efi"), []byte("efi binary"), 0o644)).To(Succeed())
	g.Expect(os.Symlink(filepath.Join(outside, "ipxe.efi"), filepath.Join(dir, "ipxe.efi"))).To(Succeed())
	g.Expect(os.Symlink(filepath.Join(outside, "ipxe.efi"), filepath.Join(dir, "other.efi"))).To(Succeed())
	addr := serve(t, tftp.Config{Root: dir, Files: map[string]string{"/ipxe.efi": filepath.Join(dir, "ipxe.efi")}}, "127.0.0.1:0", nil)
	c, err := tftplib.NewClient(addr.String())
	g.Expect(err).NotTo(HaveOccurred())
	c.SetTimeout(time.Second)
	wt, err := c.Receive("ipxe.efi", "octet")
	g.Expect(err).NotTo(HaveOccurred())
	var buf bytes.Buffer
	_, err = wt.WriteTo(&buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(buf.String()).To(Equal("efi binary"))
	_, err = c.Receive("other.efi", "octet")
	g.Expect(err).To(HaveOccurred())
}
