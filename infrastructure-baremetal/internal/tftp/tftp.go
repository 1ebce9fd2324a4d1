// Package tftp serves the network-boot binaries (undionly.kpxe, ipxe.efi, snp.efi…) read-only over TFTP.
// Files come from one directory (Debian's /usr/lib/ipxe by default); every request is resolved inside it
// with os.Root, so neither "..", absolute names nor symlinks can reach anything outside. Block size
// (RFC 2348) and transfer size (RFC 2349, the size probes firmware sends before downloading) are
// negotiated; the window size option (RFC 7440) is not offered back, so clients fall back to lock-step,
// which RFC 7440 requires them to accept.
package tftp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	tftplib "github.com/pin/tftp/v3"
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
	// Timeout per datagram (default 2s) and Retries before a transfer is aborted (default 5).
	Timeout time.Duration
	Retries int
}

// Metrics are the TFTP Prometheus metrics.
type Metrics struct {
	Transfers *prometheus.CounterVec
	Bytes     prometheus.Counter
}

// NewMetrics registers the TFTP metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "yonder_metal_tftp_transfers_total",
			Help: "TFTP read requests by result (ok, not_found, refused, failed).",
		}, []string{"result"}),
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "yonder_metal_tftp_sent_bytes_total", Help: "Bytes sent in completed TFTP transfers.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Transfers, m.Bytes)
	}
	return m
}

// Server is a read-only TFTP server.
type Server struct {
	root    *os.Root
	files   map[string]string
	srv     *tftplib.Server
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
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Retries == 0 {
		cfg.Retries = 5
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
	s := &Server{root: root, files: files, log: log, metrics: metrics}
	s.srv = tftplib.NewServer(s.read, nil) // nil write handler: writes are refused
	s.srv.SetBlockSize(cfg.MaxBlockSize)
	s.srv.SetTimeout(cfg.Timeout)
	s.srv.SetRetries(cfg.Retries)
	return s, nil
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

func (s *Server) read(filename string, rf io.ReaderFrom) error {
	p, err := CleanPath(filename)
	if err != nil {
		s.metrics.Transfers.WithLabelValues("refused").Inc()
		s.log.V(4).Info("Refusing TFTP request", "file", filename)
		return fmt.Errorf("failed to read %q: %w", filename, err)
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
		return fmt.Errorf("failed to open %q: %w", p, os.ErrNotExist)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		s.metrics.Transfers.WithLabelValues("not_found").Inc()
		return fmt.Errorf("failed to open %q: %w", p, os.ErrNotExist)
	}
	if ot, ok := rf.(tftplib.OutgoingTransfer); ok {
		ot.SetSize(fi.Size()) // answers tsize size probes
	}
	n, err := rf.ReadFrom(f)
	if err != nil {
		s.metrics.Transfers.WithLabelValues("failed").Inc()
		s.log.V(4).Info("TFTP transfer ended early", "file", p, "sent", n, "error", err.Error())
		return fmt.Errorf("failed to send %q: %w", p, err)
	}
	s.metrics.Transfers.WithLabelValues("ok").Inc()
	s.metrics.Bytes.Add(float64(n))
	s.log.V(2).Info("Sent TFTP file", "file", p, "bytes", n)
	return nil
}

// Serve answers requests on conn until ctx ends.
func (s *Server) Serve(ctx context.Context, conn net.PacketConn) error {
	go func() {
		<-ctx.Done()
		s.srv.Shutdown()
	}()
	if err := s.srv.Serve(conn); err != nil && ctx.Err() == nil {
		return fmt.Errorf("failed to serve TFTP: %w", err)
	}
	return nil
}

// Close releases the root directory.
func (s *Server) Close() error { return s.root.Close() }
