package tftp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxNetasciiSize bounds the files served in netascii mode, which are converted in memory (configuration
// text, never boot binaries).
const maxNetasciiSize = 16 << 20

// clientError is an ERROR packet from the client: it ended the transfer (UEFI firmware does so after its
// size probe, with error 8).
type clientError struct {
	code uint16
	msg  string
}

func (e *clientError) Error() string { return fmt.Sprintf("client sent error %d: %q", e.code, e.msg) }

// serveRead runs one read transfer from a port of its own, connected to the client.
func (s *Server) serveRead(ctx context.Context, local net.IP, peer *net.UDPAddr, req request) {
	conn, err := net.DialUDP("udp", &net.UDPAddr{IP: local}, peer)
	if err != nil {
		s.metrics.Transfers.WithLabelValues("failed").Inc()
		s.log.Error(err, "Failed to open a TFTP transfer socket", "peer", peer.String())
		return
	}
	defer func() { _ = conn.Close() }()
	// A shutdown ends the wait for the next ACK at once.
	defer context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })()
	f, size, code, err := s.open(req.filename)
	if err != nil {
		msg := "file not found"
		if code == errAccess {
			msg = "access violation: file name refused"
		}
		_, _ = conn.Write(errorPacket(code, msg))
		return
	}
	defer func() { _ = f.Close() }()
	var src io.ReaderAt = f
	switch req.mode {
	case "octet":
	case "netascii":
		data, err := netascii(f, size)
		if err != nil {
			s.metrics.Transfers.WithLabelValues("refused").Inc()
			_, _ = conn.Write(errorPacket(errNotDefined, err.Error()))
			return
		}
		src, size = bytes.NewReader(data), int64(len(data))
	default:
		s.metrics.Transfers.WithLabelValues("refused").Inc()
		_, _ = conn.Write(errorPacket(errIllegalOp, fmt.Sprintf("transfer mode %q not supported: use octet", req.mode)))
		return
	}
	neg := negotiate(req.options, size, s.cfg.MaxBlockSize, s.cfg.MaxWindowSize)
	t := &transfer{conn: conn, src: src, size: size, blockSize: neg.blockSize, window: neg.windowSize,
		timeout: s.cfg.Timeout, retries: s.cfg.Retries, oack: neg.oack, server: s}
	if neg.timeoutSec > 0 {
		t.timeout = time.Duration(neg.timeoutSec) * time.Second
	}
	err = t.run(ctx)
	if err != nil && !errors.As(err, new(*clientError)) && ctx.Err() == nil {
		_, _ = conn.Write(errorPacket(errNotDefined, "transfer failed: "+err.Error()))
	}
	s.logTransferEnd(req.filename, size, err)
}

// netascii converts a text file to netascii (RFC 764): LF becomes CR LF, a bare CR becomes CR NUL.
func netascii(r io.Reader, size int64) ([]byte, error) {
	if size > maxNetasciiSize {
		return nil, fmt.Errorf("file of %d bytes too large for netascii mode (at most %d): use octet", size, maxNetasciiSize)
	}
	in, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(in)+len(in)/16)
	for _, c := range in {
		switch c {
		case '\n':
			out = append(out, '\r', '\n')
		case '\r':
			out = append(out, '\r', 0)
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// transfer sends one file: blocks 1..last, window blocks at a time (RFC 7440), each window answered by one
// ACK. Block 0 stands for the OACK when options were negotiated. Block numbers on the wire wrap at 65536
// (to 0, as tftp-hpa and iPXE expect); inside they are absolute.
type transfer struct {
	conn      *net.UDPConn
	src       io.ReaderAt
	size      int64
	blockSize int
	window    int
	timeout   time.Duration
	retries   int
	oack      []option
	server    *Server

	bufs [][]byte
	in   []byte
}

func (t *transfer) run(ctx context.Context) error {
	last := t.size/int64(t.blockSize) + 1 // the final block is short, possibly empty
	base := int64(1)                      // the first block not acknowledged yet
	if len(t.oack) > 0 {
		base = 0
	}
	t.in = make([]byte, 65536)
	tries := 0
	for base <= last {
		end := min(base+int64(t.window)-1, last)
		if base == 0 {
			end = 0 // the OACK is a window of its own: its ACK 0 says which options the client took
		}
		if err := t.send(base, end); err != nil {
			return err
		}
		acked, err := t.awaitAck(ctx, base-1, end)
		switch {
		case err != nil:
			return err
		case acked == end:
			base, tries = end+1, 0
			continue
		case acked >= base: // part of the window arrived: go on from the first lost block
			base, tries = acked+1, 0
		default: // timeout
			tries++
			if tries > t.retries {
				return fmt.Errorf("no ACK for block %d after %d retries", base, t.retries)
			}
		}
		t.server.metrics.Retransmits.Inc()
	}
	return nil
}

// send sends blocks from..to (block 0: the OACK).
func (t *transfer) send(from, to int64) error {
	for k := from; k <= to; k++ {
		if k == 0 {
			if _, err := t.conn.Write(oackPacket(t.oack)); err != nil {
				return fmt.Errorf("failed to send OACK: %w", err)
			}
			continue
		}
		i := int(k - from)
		for len(t.bufs) <= i {
			t.bufs = append(t.bufs, make([]byte, 4+t.blockSize))
		}
		buf := t.bufs[i]
		binary.BigEndian.PutUint16(buf, opDATA)
		binary.BigEndian.PutUint16(buf[2:], uint16(k)) //nolint:gosec // block numbers wrap by design (rollover)
		n, err := t.src.ReadAt(buf[4:], (k-1)*int64(t.blockSize))
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("failed to read block %d: %w", k, err)
		}
		if n < t.blockSize && (k-1)*int64(t.blockSize)+int64(n) != t.size {
			return fmt.Errorf("file changed during the transfer: block %d has %d bytes", k, n)
		}
		if _, err := t.conn.Write(buf[:4+n]); err != nil {
			return fmt.Errorf("failed to send block %d: %w", k, err)
		}
	}
	return nil
}

// awaitAck waits up to the timeout for an ACK of a block in prev+1..end and returns the block it
// acknowledges, or prev when none came (a timeout). ACKs of older blocks (duplicates, the client's
// re-ACK of the last block it had) do not trigger a resend: that would double every later window
// (Sorcerer's Apprentice, RFC 1123 4.2.3.1).
func (t *transfer) awaitAck(ctx context.Context, prev, end int64) (int64, error) {
	if err := t.conn.SetReadDeadline(time.Now().Add(t.timeout)); err != nil {
		return prev, err
	}
	for {
		n, err := t.conn.Read(t.in)
		if err != nil {
			if ctx.Err() != nil {
				return prev, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return prev, nil
			}
			return prev, fmt.Errorf("failed to receive ACK: %w", err) // e.g. ICMP port unreachable: the client is gone
		}
		if n < 4 {
			continue
		}
		switch binary.BigEndian.Uint16(t.in) {
		case opACK:
			wire := binary.BigEndian.Uint16(t.in[2:])
			acked := prev + int64(wire-uint16(prev)) //nolint:gosec // modular distance from prev, by design
			if acked > prev && acked <= end {
				return acked, nil
			}
		case opERROR:
			msg, _, _ := bytes.Cut(t.in[4:n], []byte{0})
			return prev, &clientError{code: binary.BigEndian.Uint16(t.in[2:]), msg: string(msg)}
		}
	}
}
