// Package tftpclient is a small TFTP read client (RFC 1350) that asks for block size, transfer size and
// window size (RFC 2348, 2349, 7440). None of the clients Debian packages can be driven 50 at a time from
// a Go benchmark, and pin/tftp's client negotiates no window size, so the TFTP tests and benchmarks use
// this one; the real clients (tftp-hpa, atftp, busybox, curl) are tested against the server too.
package tftpclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Options are what the client asks for; zero values leave an option out.
type Options struct {
	// BlockSize (RFC 2348) and WindowSize (RFC 7440) to ask for.
	BlockSize  int
	WindowSize int
	// TSize asks for the transfer size (RFC 2349).
	TSize bool
	// Timeout per datagram (default 1s) and Retries (default 5).
	Timeout time.Duration
	Retries int
}

// Result is what a transfer negotiated and moved.
type Result struct {
	Bytes int64
	// TSize is the size the server announced, -1 if it did not.
	TSize int64
	// BlockSize and WindowSize are the negotiated ones (512 and 1 without options).
	BlockSize, WindowSize int
}

// Get reads file from server (host:port) into w.
func Get(ctx context.Context, server, file string, w io.Writer, o Options) (Result, error) {
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.Retries == 0 {
		o.Retries = 5
	}
	raddr, err := net.ResolveUDPAddr("udp4", server)
	if err != nil {
		return Result{}, err
	}
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = conn.Close() }()
	defer context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })()
	c := &client{conn: conn, w: w, o: o, res: Result{TSize: -1, BlockSize: 512, WindowSize: 1}, buf: make([]byte, 65536+4)}
	err = c.run(ctx, raddr, rrq(file, o))
	return c.res, err
}

func rrq(file string, o Options) []byte {
	b := append([]byte{0, 1}, file...)
	b = append(b, "\x00octet\x00"...)
	add := func(k string, v int) { b = append(append(append(append(b, k...), 0), strconv.Itoa(v)...), 0) }
	if o.BlockSize > 0 {
		add("blksize", o.BlockSize)
	}
	if o.TSize {
		add("tsize", 0)
	}
	if o.WindowSize > 0 {
		add("windowsize", o.WindowSize)
	}
	return b
}

type client struct {
	conn *net.UDPConn
	peer *net.UDPAddr // the server's transfer port (TID), known from its first answer
	w    io.Writer
	o    Options
	res  Result
	buf  []byte
}

// run sends the request and receives until the short final block. As RFC 7440's receiver, it ACKs every
// WindowSize-th block and, on a gap (a lost or reordered block) or a timeout, re-ACKs the last block it
// has, from which the server resends.
func (c *client) run(ctx context.Context, server *net.UDPAddr, req []byte) error {
	next := int64(1) // the block expected next
	inWindow, tries, gapAcked := 0, 0, false
	lastSent, lastTo := req, server
	if _, err := c.conn.WriteToUDP(req, server); err != nil {
		return err
	}
	for {
		if err := c.conn.SetReadDeadline(time.Now().Add(c.o.Timeout)); err != nil {
			return err
		}
		n, from, err := c.conn.ReadFromUDP(c.buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				return err
			}
			if tries++; tries > c.o.Retries {
				return fmt.Errorf("no answer after %d retries (expecting block %d)", c.o.Retries, next)
			}
			if _, err := c.conn.WriteToUDP(lastSent, lastTo); err != nil {
				return err
			}
			continue
		}
		if c.peer == nil {
			c.peer = from
		} else if !from.IP.Equal(c.peer.IP) || from.Port != c.peer.Port {
			_, _ = c.conn.WriteToUDP([]byte{0, 5, 0, 5, 'u', 'n', 'k', 'n', 'o', 'w', 'n', ' ', 'T', 'I', 'D', 0}, from)
			continue
		}
		if n < 4 {
			continue
		}
		p := c.buf[:n]
		switch binary.BigEndian.Uint16(p) {
		case 5:
			msg, _, _ := bytes.Cut(p[4:], []byte{0})
			return fmt.Errorf("server error %d: %s", binary.BigEndian.Uint16(p[2:]), msg)
		case 6:
			if next != 1 || c.res.Bytes > 0 {
				continue // a duplicate OACK: our ACK 0 is on its way or lost, the timeout resends it
			}
			if err := c.applyOACK(p[2:]); err != nil {
				_, _ = c.conn.WriteToUDP([]byte{0, 5, 0, 8, 0}, c.peer)
				return err
			}
			lastSent, lastTo = ack(0), c.peer
			tries = 0
			if _, err := c.conn.WriteToUDP(lastSent, c.peer); err != nil {
				return err
			}
		case 3:
			if uint16(next) != binary.BigEndian.Uint16(p[2:]) {
				// A gap or an old block: say once which block we have, the server goes on from there (a lost
				// ACK is resent by the timeout).
				if !gapAcked {
					lastSent, lastTo, inWindow, gapAcked = ack(next-1), c.peer, 0, true
					_, _ = c.conn.WriteToUDP(lastSent, c.peer)
				}
				continue
			}
			gapAcked = false
			data := p[4:]
			if _, err := c.w.Write(data); err != nil {
				_, _ = c.conn.WriteToUDP([]byte{0, 5, 0, 3, 'w', 'r', 'i', 't', 'e', 0}, c.peer)
				return err
			}
			c.res.Bytes += int64(len(data))
			tries = 0
			inWindow++
			final := len(data) < c.res.BlockSize
			if final || inWindow == c.res.WindowSize {
				lastSent, lastTo, inWindow = ack(next), c.peer, 0
				if _, err := c.conn.WriteToUDP(lastSent, c.peer); err != nil {
					return err
				}
			}
			next++
			if final {
				if c.res.TSize >= 0 && c.res.TSize != c.res.Bytes {
					return fmt.Errorf("received %d bytes, the server announced %d", c.res.Bytes, c.res.TSize)
				}
				return nil
			}
		}
	}
}

// applyOACK takes the server's answer to our options; it may only lower what we asked for.
func (c *client) applyOACK(b []byte) error {
	fields := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if len(fields)%2 != 0 {
		return fmt.Errorf("malformed OACK %q", b)
	}
	for i := 0; i < len(fields); i += 2 {
		v, err := strconv.ParseInt(fields[i+1], 10, 64)
		if err != nil {
			return fmt.Errorf("malformed OACK value %q for %s", fields[i+1], fields[i])
		}
		switch strings.ToLower(fields[i]) {
		case "blksize":
			if c.o.BlockSize == 0 || v < 8 || v > int64(c.o.BlockSize) {
				return fmt.Errorf("server answered blksize %d, asked for %d", v, c.o.BlockSize)
			}
			c.res.BlockSize = int(v)
		case "windowsize":
			if c.o.WindowSize == 0 || v < 1 || v > int64(c.o.WindowSize) {
				return fmt.Errorf("server answered windowsize %d, asked for %d", v, c.o.WindowSize)
			}
			c.res.WindowSize = int(v)
		case "tsize":
			c.res.TSize = v
		default:
			return fmt.Errorf("server answered option %q, never asked for", fields[i])
		}
	}
	return nil
}

// ack is the ACK of an absolute block number (wrapped to 16 bits on the wire).
func ack(block int64) []byte {
	return binary.BigEndian.AppendUint16([]byte{0, 4}, uint16(block)) //nolint:gosec // block numbers wrap by design
}
