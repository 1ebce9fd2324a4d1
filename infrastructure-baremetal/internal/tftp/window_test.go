package tftp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/tftp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/tftp/tftpclient"
)

// serveLoopback serves cfg on 127.0.0.1 and returns the address.
func serveLoopback(t *testing.T, cfg tftp.Config, metrics *tftp.Metrics) string {
	t.Helper()
	return serve(t, cfg, "127.0.0.1:0", metrics).String()
}

func randomFile(t *testing.T, dir, name string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWindowSizeNegotiation: what the server agrees to (capped by its limits), and that the file arrives
// whole for every shape of the last window: a short block, an empty block (size a multiple of the block
// size), an empty file, a window larger than the file, and block numbers that wrap past 65535.
func TestWindowSizeNegotiation(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"short":    randomFile(t, dir, "short", 100_000),
		"multiple": randomFile(t, dir, "multiple", 1468*64),
		"empty":    randomFile(t, dir, "empty", 0),
		"wraps":    randomFile(t, dir, "wraps", 16*70_000+3), // 70,001 blocks of 16 bytes
	}
	addr := serveLoopback(t, tftp.Config{Root: dir, MaxWindowSize: 32, Timeout: time.Second}, nil)
	for _, tc := range []struct {
		name, file       string
		opts             tftpclient.Options
		wantBlk, wantWin int
		wantTSize        int64
	}{
		{"no options: RFC 1350 lock-step, 512-byte blocks", "short", tftpclient.Options{}, 512, 1, -1},
		{"window capped at the server's 32", "short", tftpclient.Options{BlockSize: 1468, WindowSize: 200, TSize: true}, 1468, 32, 100_000},
		{"block size capped at the server's 1468", "short", tftpclient.Options{BlockSize: 9000, WindowSize: 4}, 1468, 4, -1},
		{"size a multiple of the block size ends with an empty block", "multiple", tftpclient.Options{BlockSize: 1468, WindowSize: 16, TSize: true}, 1468, 16, 1468 * 64},
		{"empty file", "empty", tftpclient.Options{BlockSize: 1468, WindowSize: 16, TSize: true}, 1468, 16, 0},
		{"window larger than the file", "short", tftpclient.Options{BlockSize: 65464, WindowSize: 32}, 1468, 32, -1},
		{"block numbers wrap past 65535", "wraps", tftpclient.Options{BlockSize: 16, WindowSize: 32}, 16, 32, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var buf bytes.Buffer
			res, err := tftpclient.Get(context.Background(), addr, tc.file, &buf, tc.opts)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(buf.Bytes()).To(Equal(files[tc.file]))
			g.Expect(res).To(Equal(tftpclient.Result{Bytes: int64(len(files[tc.file])), TSize: tc.wantTSize,
				BlockSize: tc.wantBlk, WindowSize: tc.wantWin}))
		})
	}
}

// lossyProxy relays one client's datagrams to a TFTP server and back, dropping each datagram that drop
// selects (once per distinct packet kind/block, as the drop function decides).
type lossyProxy struct {
	front, back *net.UDPConn
	mu          sync.Mutex
	client      *net.UDPAddr
	serverTID   *net.UDPAddr
	dropped     []string
}

func startLossyProxy(t *testing.T, server string, drop func(fromServer bool, p []byte) (string, bool)) string {
	t.Helper()
	srvAddr, err := net.ResolveUDPAddr("udp4", server)
	if err != nil {
		t.Fatal(err)
	}
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{front: front, back: back}
	t.Cleanup(func() { _ = front.Close(); _ = back.Close() })
	seen := map[string]bool{}
	relay := func(from *net.UDPConn, fromServer bool) {
		buf := make([]byte, 65536)
		for {
			n, src, err := from.ReadFromUDP(buf)
			if err != nil {
				return
			}
			pkt := buf[:n]
			p.mu.Lock()
			if key, ok := drop(fromServer, pkt); ok && !seen[key] {
				seen[key] = true
				p.dropped = append(p.dropped, key)
				p.mu.Unlock()
				continue
			}
			var to *net.UDPAddr
			out := p.back
			if fromServer {
				p.serverTID, to, out = src, p.client, p.front
			} else {
				p.client, to = src, p.serverTID
				if binary.BigEndian.Uint16(pkt) == 1 {
					to = srvAddr // a request goes to the server's well-known port
				}
			}
			p.mu.Unlock()
			if to != nil {
				_, _ = out.WriteToUDP(pkt, to)
			}
		}
	}
	go relay(front, false)
	go relay(back, true)
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Logf("proxy dropped %v", p.dropped)
	})
	return front.LocalAddr().String()
}

// dataBlock selects DATA packets with the given block numbers.
func dataBlock(blocks ...uint16) func(bool, []byte) (string, bool) {
	return func(fromServer bool, p []byte) (string, bool) {
		if !fromServer || len(p) < 4 || binary.BigEndian.Uint16(p) != 3 {
			return "", false
		}
		b := binary.BigEndian.Uint16(p[2:])
		for _, want := range blocks {
			if b == want {
				return fmt.Sprintf("DATA %d", b), true
			}
		}
		return "", false
	}
}

// TestWindowedTransferWithLoss drops datagrams between a windowed client and the server: a DATA block in
// the middle of a window (the client re-ACKs the block before the gap, the server goes on from there),
// the very last block (timeout, resend of the last window), a window's ACK, the OACK's ACK 0. Every
// transfer completes with the exact bytes, and the server counts its resends.
func TestWindowedTransferWithLoss(t *testing.T) {
	dir := t.TempDir()
	data := randomFile(t, dir, "ipxe.efi", 1468*40+700) // 41 blocks: windows of 8 end at 8, 16, … 40, 41
	metrics := tftp.NewMetrics(prometheus.NewRegistry())
	server := serveLoopback(t, tftp.Config{Root: dir, Timeout: 300 * time.Millisecond}, metrics)
	ackOf := func(block uint16) func(bool, []byte) (string, bool) {
		return func(fromServer bool, p []byte) (string, bool) {
			return fmt.Sprintf("ACK %d", block), !fromServer && len(p) == 4 && binary.BigEndian.Uint16(p) == 4 && binary.BigEndian.Uint16(p[2:]) == block
		}
	}
	for _, tc := range []struct {
		name string
		drop func(bool, []byte) (string, bool)
	}{
		{"a DATA block in the middle of a window", dataBlock(5)},
		{"two blocks in different windows", dataBlock(12, 30)},
		{"the last block of the file", dataBlock(41)},
		{"the ACK of a full window", ackOf(16)},
		{"the ACK of the OACK", ackOf(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			before := testutil.ToFloat64(metrics.Retransmits)
			proxy := startLossyProxy(t, server, tc.drop)
			var buf bytes.Buffer
			res, err := tftpclient.Get(context.Background(), proxy, "ipxe.efi", &buf,
				tftpclient.Options{BlockSize: 1468, WindowSize: 8, TSize: true, Timeout: 500 * time.Millisecond})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.WindowSize).To(Equal(8))
			g.Expect(buf.Bytes()).To(Equal(data))
			g.Eventually(func() float64 { return testutil.ToFloat64(metrics.Retransmits) }).
				WithTimeout(10 * time.Second).Should(BeNumerically(">", before))
		})
	}
}

// TestNegotiationLimits: invalid limits are refused at New, with what is allowed.
func TestNegotiationLimits(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []tftp.Config{
		{Root: dir, MaxBlockSize: 4}, {Root: dir, MaxBlockSize: 70000}, {Root: dir, MaxWindowSize: -1},
		{Root: dir, MaxWindowSize: 70000}, {Root: dir, Retries: -1},
	} {
		_, err := tftp.New(cfg, logr.Discard(), nil)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("invalid TFTP")))
	}
}
