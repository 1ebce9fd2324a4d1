// Package tftp serves the network-boot binaries (undionly.kpxe, ipxe.efi, snp.efi…) read-only over TFTP.
// Files come from one directory (Debian's /usr/lib/ipxe by default); every request is resolved inside it
// with os.Root, so neither "..", absolute names nor symlinks can reach anything outside. The server is
// Yonder's own (RFC 1350 with option negotiation, RFC 2347): block size (RFC 2348), transfer size and
// timeout (RFC 2349, including the size probes UEFI firmware sends and aborts before downloading) and
// window size (RFC 7440, several blocks in flight per ACK, which is what makes TFTP fast on a LAN). The
// library used before (pin/tftp v3.2.0) negotiates no window size, and none of the maintained Go TFTP
// libraries the module proxy serves does; the read-only protocol is small enough to own.
package tftp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultRoot is where Debian's ipxe package installs its binaries.
const DefaultRoot = "/usr/lib/ipxe"

// Config configures the TFTP server.
type Config struct {
	// Root is the directory served (default DefaultRoot).
	Root string
	// Files are extra names served from explicit paths, resolved (symlinks followed) once at start. Requests
	// can only select these names, never the paths. With the default Root, ipxe.efi maps to Debian's
	// /usr/lib/ipxe/ipxe.efi, which is a symlink to /boot/ipxe.efi that os.Root rightly refuses to follow.
	Files map[string]string
	// MaxBlockSize caps the negotiated block size (default 1468: one Ethernet frame without fragments).
	MaxBlockSize int
	// MaxWindowSize caps the negotiated window size, the blocks sent before waiting for an ACK (default 64;
	// 1 turns RFC 7440 off: every block waits for its ACK).
	MaxWindowSize int
	// Timeout per datagram (default 2s) and Retries before a transfer is aborted (default 5).
	Timeout time.Duration
	Retries int
}

// Metrics are the TFTP Prometheus metrics.
type Metrics struct {
	Transfers   *prometheus.CounterVec
	Bytes       prometheus.Counter
	Retransmits prometheus.Counter
}

// NewMetrics registers the TFTP metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "yonder_metal_tftp_transfers_total",
			Help: "TFTP read requests by result (ok, not_found, refused, aborted: the client ended it with an error packet, e.g. after a size probe; failed: no answer after every retry).",
		}, []string{"result"}),
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "yonder_metal_tftp_sent_bytes_total", Help: "Bytes sent in completed TFTP transfers.",
		}),
		Retransmits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "yonder_metal_tftp_retransmits_total",
			Help: "Windows (or OACKs) sent again after a timeout or after an ACK that acknowledged only part of a window.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Transfers, m.Bytes, m.Retransmits)
	}
	return m
}

// Server is a read-only TFTP server.
type Server struct {
	cfg     Config
	root    *os.Root
	files   map[string]string
	log     logr.Logger
	metrics *Metrics
}

// ErrRefused is returned for names that are not a plain relative path inside the root.
var ErrRefused = errors.New("file name refused")

// New opens the root directory and prepares the server.
func New(cfg Config, log logr.Logger, metrics *Metrics) (*Server, error) {
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
		if cfg.Files == nil {
			cfg.Files = map[string]string{"ipxe.efi": filepath.Join(DefaultRoot, "ipxe.efi")}
		}
	}
	if cfg.MaxBlockSize == 0 {
		cfg.MaxBlockSize = 1468
	}
	if cfg.MaxWindowSize == 0 {
		cfg.MaxWindowSize = 64
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 5
	}
	if cfg.MaxBlockSize < minBlockSize || cfg.MaxBlockSize > maxBlockSize {
		return nil, fmt.Errorf("invalid TFTP MaxBlockSize %d: must be %d to %d", cfg.MaxBlockSize, minBlockSize, maxBlockSize)
	}
	if cfg.MaxWindowSize < 1 || cfg.MaxWindowSize > maxWindowSize {
		return nil, fmt.Errorf("invalid TFTP MaxWindowSize %d: must be 1 to %d", cfg.MaxWindowSize, maxWindowSize)
	}
	if cfg.Timeout < 0 || cfg.Retries < 0 {
		return nil, fmt.Errorf("invalid TFTP Timeout %s / Retries %d: must not be negative", cfg.Timeout, cfg.Retries)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("failed to open TFTP root %s: %w", cfg.Root, err)
	}
	files := map[string]string{}
	for name, p := range cfg.Files {
		clean, err := CleanPath(name)
		if err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("failed to configure TFTP file %q: %w", name, err)
		}
		resolved, err := filepath.EvalSymlinks(p)
		if err != nil {
			_ = root.Close()
			return nil, fmt.Errorf("failed to resolve TFTP file %q (%s): %w", name, p, err)
		}
		files[clean] = resolved
	}
	return &Server{cfg: cfg, root: root, files: files, log: log, metrics: metrics}, nil
}

// CleanPath turns a requested file name into a path relative to the root, or refuses it. TFTP clients
// send "/file", "file" or (some firmware) "dir\file"; all map into the root.
func CleanPath(name string) (string, error) {
	if name == "" || len(name) > 255 || strings.ContainsRune(name, 0) {
		return "", ErrRefused
	}
	name = strings.ReplaceAll(name, `\`, "/")
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", ErrRefused
		}
	}
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	if p == "" || p == "." {
		return "", ErrRefused
	}
	return p, nil
}

// open resolves a requested name to an open regular file, or says why not with the TFTP error to send.
func (s *Server) open(filename string) (*os.File, int64, uint16, error) {
	p, err := CleanPath(filename)
	if err != nil {
		s.metrics.Transfers.WithLabelValues("refused").Inc()
		s.log.V(4).Info("Refusing TFTP request", "file", filename)
		return nil, 0, errAccess, fmt.Errorf("failed to read %q: %w", filename, err)
	}
	var f *os.File
	if extra, ok := s.files[p]; ok {
		f, err = os.Open(extra) //nolint:gosec // an operator-configured path, selected by exact name only
	} else {
		f, err = s.root.Open(p)
	}
	if err != nil {
		s.metrics.Transfers.WithLabelValues("not_found").Inc()
		s.log.V(4).Info("Refusing TFTP request", "file", filename, "error", err.Error())
		return nil, 0, errNotFound, fmt.Errorf("failed to open %q: %w", p, os.ErrNotExist)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		s.metrics.Transfers.WithLabelValues("not_found").Inc()
		return nil, 0, errNotFound, fmt.Errorf("failed to open %q: %w", p, os.ErrNotExist)
	}
	return f, fi.Size(), 0, nil
}

// Serve answers requests on conn until ctx ends; it then closes conn and waits for running transfers to stop.
// Each transfer runs from its own UDP port (its TID, RFC 1350) on conn's address.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go func() { <-ctx.Done(); _ = conn.Close() }()
	var local net.IP
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsUnspecified() {
		local = a.IP
	}
	buf := make([]byte, 65536)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("failed to serve TFTP: %w", err)
		}
		peer, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		req, err := parseRequest(buf[:n])
		if err != nil {
			// Stray ACKs or DATA for a finished transfer, garbage: answered only if it looked like a request.
			if n >= 2 && buf[0] == 0 && (buf[1] == opRRQ || buf[1] == opWRQ) {
				_, _ = conn.WriteTo(errorPacket(errIllegalOp, "malformed request"), peer)
			}
			continue
		}
		if req.op == opWRQ {
			s.metrics.Transfers.WithLabelValues("refused").Inc()
			_, _ = conn.WriteTo(errorPacket(errAccess, "read-only server: writes are refused"), peer)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveRead(ctx, local, peer, req)
		}()
	}
}

// Close releases the root directory.
func (s *Server) Close() error { return s.root.Close() }

// logTransferEnd records a finished transfer in the metrics and the log.
func (s *Server) logTransferEnd(file string, sent int64, err error) {
	var aborted *clientError
	switch {
	case err == nil:
		s.metrics.Transfers.WithLabelValues("ok").Inc()
		s.metrics.Bytes.Add(float64(sent))
		s.log.V(2).Info("Sent TFTP file", "file", file, "bytes", sent)
	case errors.As(err, &aborted):
		s.metrics.Transfers.WithLabelValues("aborted").Inc()
		s.log.V(4).Info("TFTP transfer ended by the client", "file", file, "sent", sent, "error", err.Error())
	default:
		s.metrics.Transfers.WithLabelValues("failed").Inc()
		s.log.V(4).Info("TFTP transfer ended early", "file", file, "sent", sent, "error", err.Error())
	}
}
