// Package bootserver is the HTTP side of network boot: per-host iPXE scripts (kernel, initrd and a command
// line carrying the host's one-time boot ticket), boot artifacts (range requests, SHA-256 digests), and —
// mounted from package attest — the attestation API and the bootstrap-data endpoint.
package bootserver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/pkg/newc"
)

// TicketIssuer issues one-time boot tickets (attest.Service), each bound to the address that fetched the
// script; leased says that this address is the host's DHCP lease, served by this site's DHCP server
// (Yonder's own), so that the session the ticket opens is the host's and its fatal refusals count against
// it (attest.Result.Fatal). An error (too many tickets for the host) refuses the script.
type TicketIssuer interface {
	IssueTicket(host string, from netip.Addr, leased bool) (string, error)
}

// Refusal reasons of GET /ipxe/<mac>, in the response body and the log.
const (
	// ReasonNotReservedAddress: the script was asked for from another address than the host's DHCP lease.
	ReasonNotReservedAddress = "NotTheHostsLeaseAddress"
	// ReasonTicketRefused: the attestation service issued no ticket (per-host rate limit).
	ReasonTicketRefused = "TicketRefused"
)

// Config configures the boot server.
type Config struct {
	// BaseURL is how hosts reach this server, e.g. http://10.0.0.1:8080 (no trailing slash); it goes into
	// scripts and the yonder.server= kernel argument.
	BaseURL string
	// ArtifactsDir holds kernels, initrds and iPXE binaries served under /artifacts/.
	ArtifactsDir string
	// Lookup finds hosts by MAC; Tickets issues their boot tickets (nil: scripts carry no ticket).
	Lookup  inventory.Lookup
	Tickets TicketIssuer
	// API serves /attestation/, /bootstrap/ and /provisioning/ (attest.Service.Handler()); nil: not mounted.
	API http.Handler
	// LiveISOs serves /live/: the verified live ISOs that hosts SAN-boot (liveiso.Cache.Handler()); nil:
	// not mounted.
	LiveISOs http.Handler
	// BindToReservation serves a host's script only to the address its DHCP reservation leases (set when
	// this site's DHCP server leases the addresses; a host without a reservation is served from anywhere).
	// Only the tickets of scripts so bound are leased (TicketIssuer): without it (proxyDHCP) no refusal
	// of an attestation session is evidence against a host, because anyone on the boot LAN can fetch its
	// script from an address of its own.
	BindToReservation bool
	// ServerKey is the public half of the key that signs released instructions (nil: they are unsigned).
	// A host with an initrd then boots a second one, KeyArchivePath: a cpio archive holding the key as
	// ServedServerKeyFile, which the kernel unpacks over the boot image. So a generic boot image (a
	// release's, built without a key) verifies what this server signs without being rebuilt per site.
	ServerKey ed25519.PublicKey
}

// KeyArchivePath serves the cpio archive with the server's public key; KeyInitrdName is its initrd's name
// in the script (the kernel's initrd= for EFI boots).
const (
	KeyArchivePath = "/boot/v1/server-key.cpio"
	KeyInitrdName  = "yonder-key"
)

// ServedServerKeyFile is where the key archive puts the key (PEM) in the boot image's root: beside, not
// over, the key a boot image may have been built with (/etc/yonder/boot-server.pub), which the agent
// prefers — a key built into an image delivered over a trusted channel must not be replaced by whatever
// the boot network serves.
const ServedServerKeyFile = "etc/yonder/boot-server.served.pub"

// Metrics are the HTTP Prometheus metrics.
type Metrics struct {
	Requests *prometheus.CounterVec
	Bytes    *prometheus.CounterVec
}

// NewMetrics registers the boot HTTP metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "yonder_metal_http_requests_total", Help: "Boot HTTP requests by handler and status code.",
		}, []string{"handler", "code"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "yonder_metal_http_sent_bytes_total", Help: "Boot HTTP response bytes by handler.",
		}, []string{"handler"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Bytes)
	}
	return m
}

// Server is the boot HTTP server.
type Server struct {
	cfg     Config
	root    *os.Root
	log     logr.Logger
	metrics *Metrics

	mu   sync.Mutex
	sums map[string]digest // artifact path → digest of one (size, mtime) version

	keyArchive []byte // KeyArchivePath's content; nil without Config.ServerKey
}

type digest struct {
	size  int64
	mtime time.Time
	sum   [sha256.Size]byte
}

// New opens the artifacts directory.
func New(cfg Config, log logr.Logger, metrics *Metrics) (*Server, error) {
	if cfg.BaseURL == "" || cfg.Lookup == nil {
		return nil, errors.New("failed to configure boot server: BaseURL and Lookup are required")
	}
	root, err := os.OpenRoot(cfg.ArtifactsDir)
	if err != nil {
		return nil, fmt.Errorf("failed to open artifacts directory %q: %w", cfg.ArtifactsDir, err)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	s := &Server{cfg: cfg, root: root, log: log, metrics: metrics, sums: map[string]digest{}}
	if cfg.ServerKey != nil {
		if s.keyArchive, err = keyArchive(cfg.ServerKey); err != nil {
			_ = root.Close()
			return nil, err
		}
	}
	return s, nil
}

// keyArchive packs the public key (PEM) as ServedServerKeyFile into an uncompressed cpio archive.
func keyArchive(key ed25519.PublicKey) ([]byte, error) {
	if len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("failed to configure boot server: the server key has %d bytes, not an Ed25519 public key's %d", len(key), ed25519.PublicKeySize)
	}
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("failed to encode the server key: %w", err)
	}
	var b bytes.Buffer
	w := newc.NewWriter(&b)
	for _, d := range []string{"etc", "etc/yonder"} {
		if err := w.Dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := w.File(ServedServerKeyFile, 0o644, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Close releases the artifacts directory.
func (s *Server) Close() error { return s.root.Close() }

// Handler serves everything.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ipxe/{mac}", s.counted("ipxe", http.HandlerFunc(s.script)))
	mux.Handle("GET /artifacts/{path...}", s.counted("artifacts", http.HandlerFunc(s.artifact)))
	if s.keyArchive != nil {
		mux.Handle("GET "+KeyArchivePath, s.counted("serverkey", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-cpio")
			http.ServeContent(w, r, path.Base(KeyArchivePath), time.Time{}, bytes.NewReader(s.keyArchive))
		})))
	}
	if s.cfg.LiveISOs != nil {
		mux.Handle("/live/", s.counted("live", s.cfg.LiveISOs))
	}
	if s.cfg.API != nil {
		mux.Handle("/attestation/", s.counted("attestation", s.cfg.API))
		mux.Handle("/bootstrap/", s.counted("bootstrap", s.cfg.API))
		mux.Handle("/provisioning/", s.counted("provisioning", s.cfg.API))
	}
	return mux
}

// ScriptFor renders a host's iPXE script with a fresh ticket bound to from (the address that asked),
// leased when from is the host's reservation and scripts are bound to reservations (BindToReservation). A
// value that would change the script instead of filling one word of it is refused (an error wrapping
// inventory.ErrInvalidBootParameter) before any ticket is issued, as is a lease-only host.
func (s *Server) ScriptFor(h inventory.Host, from netip.Addr) (string, error) {
	if h.LeaseOnly {
		return "", fmt.Errorf("failed to render the iPXE script of %s: the host only keeps its DHCP lease, it is not booted", h.Name)
	}
	if err := inventory.CheckBootValue("host name", h.Name); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "echo Yonder: booting %s\n", h.Name)
	if h.Boot.LiveISO != "" {
		// The host runs its live ISO (Metal3's format live-iso): every boot SAN-boots it, with no ticket —
		// the ISO attests nothing and receives nothing; the host attested before it was switched to it.
		if err := h.Boot.Check(); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "echo Yonder: booting its live ISO\nsanboot --no-describe %s || goto failed\n", s.liveURL(h.Boot.LiveISO))
		b.WriteString(":failed\necho Yonder: the live ISO did not boot, retrying in 30s\nsleep 30\nreboot\n")
		return b.String(), nil
	}
	if h.Boot.Kernel == "" {
		b.WriteString("echo Yonder: no boot configuration for this host yet, retrying in 30s\nsleep 30\nreboot\n")
		return b.String(), nil
	}
	if err := h.Boot.Check(); err != nil {
		return "", err
	}
	cmdline := strings.Trim(h.Boot.Cmdline+" yonder.server="+s.cfg.BaseURL, " ")
	if s.cfg.Tickets != nil {
		t, err := s.cfg.Tickets.IssueTicket(h.Name, from, s.leased(h, from))
		if err != nil {
			return "", err
		}
		cmdline += " yonder.ticket=" + t
	}
	withKey := h.Boot.Initrd != "" && s.keyArchive != nil
	if withKey {
		cmdline = "initrd=" + KeyInitrdName + " " + cmdline
	}
	if h.Boot.Initrd != "" {
		cmdline = "initrd=initrd " + cmdline
	}
	fmt.Fprintf(&b, "kernel %s %s\n", s.url(h.Boot.Kernel), cmdline)
	if h.Boot.Initrd != "" {
		fmt.Fprintf(&b, "initrd --name initrd %s\n", s.url(h.Boot.Initrd))
	}
	// After the image's initrd: the kernel unpacks the archives in this order.
	if withKey {
		fmt.Fprintf(&b, "initrd --name %s %s%s\n", KeyInitrdName, s.cfg.BaseURL, KeyArchivePath)
	}
	b.WriteString("boot\n")
	return b.String(), nil
}

// leased reports whether from is the address this site's DHCP server leases to h: the server binds scripts
// to reservations (it is the site's DHCP server) and h has one, which from is.
func (s *Server) leased(h inventory.Host, from netip.Addr) bool {
	return s.cfg.BindToReservation && h.Address.IsValid() && from.Unmap() == h.Address
}

func (s *Server) url(artifact string) string {
	if strings.HasPrefix(artifact, "http://") || strings.HasPrefix(artifact, "https://") {
		return artifact
	}
	return s.cfg.BaseURL + "/artifacts/" + strings.TrimPrefix(artifact, "/")
}

// liveURL is where a host reads its live ISO: a path on this server (the ISO cache), or a URL as given.
func (s *Server) liveURL(iso string) string {
	if strings.HasPrefix(iso, "/") {
		return s.cfg.BaseURL + iso
	}
	return iso
}

func (s *Server) script(w http.ResponseWriter, r *http.Request) {
	mac, err := net.ParseMAC(r.PathValue("mac"))
	if err != nil {
		http.Error(w, "not a MAC address", http.StatusBadRequest)
		return
	}
	h, ok := s.cfg.Lookup.HostByMAC(mac)
	if !ok {
		s.log.V(4).Info("Refusing iPXE script for unknown MAC", "mac", mac.String())
		http.NotFound(w, r)
		return
	}
	if h.LeaseOnly {
		// A provisioned host keeps its DHCP lease, not its boot: answered as an unknown MAC, no ticket.
		s.log.V(4).Info("Refusing iPXE script for a lease-only host", "host", h.Name, "mac", mac.String())
		http.NotFound(w, r)
		return
	}
	from, err := attest.SourceAddr(r)
	if err != nil {
		http.Error(w, "no remote address", http.StatusBadRequest)
		return
	}
	if s.cfg.BindToReservation && h.Address.IsValid() && from != h.Address {
		// Only the host's own lease gets its ticket: anyone else on the boot LAN naming its MAC gets nothing.
		s.log.Info("Refusing iPXE script: not asked from the host's lease address", "host", h.Name, "remote", from.String(), "lease", h.Address.String())
		http.Error(w, ReasonNotReservedAddress+": this MAC's script is served only to its DHCP lease", http.StatusForbidden)
		return
	}
	script, err := s.ScriptFor(h, from)
	switch {
	case errors.Is(err, inventory.ErrInvalidBootParameter):
		s.log.Info("Refusing iPXE script: invalid boot parameter", "host", h.Name, "error", err.Error())
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	case err != nil:
		s.log.Info("Refusing iPXE script: no ticket", "host", h.Name, "remote", from.String(), "error", err.Error())
		http.Error(w, ReasonTicketRefused+": "+err.Error(), http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store") // carries a one-time ticket
	_, _ = io.WriteString(w, script)            //nolint:gosec // a text/plain iPXE script whose every value passed inventory.CheckBootValue
	s.log.V(2).Info("Served iPXE script", "host", h.Name, "remote", r.RemoteAddr)
}

func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("path")
	if sumOf, ok := strings.CutSuffix(name, ".sha256"); ok {
		if _, err := s.root.Stat(name); err != nil { // a real .sha256 file wins
			s.sha256File(w, r, sumOf)
			return
		}
	}
	f, fi, err := s.open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer func() { _ = f.Close() }()
	sum, err := s.digest(name, f, fi)
	if err != nil {
		http.Error(w, "failed to read artifact", http.StatusInternalServerError)
		return
	}
	b64 := base64.StdEncoding.EncodeToString(sum[:])
	w.Header().Set("Repr-Digest", "sha-256=:"+b64+":") // RFC 9530, of the whole file, also on 206
	w.Header().Set("Digest", "SHA-256="+b64)           // RFC 3230, for older clients
	w.Header().Set("X-Checksum-Sha256", hex.EncodeToString(sum[:]))
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:16])+`"`)
	http.ServeContent(w, r, path.Base(name), fi.ModTime(), f) // ranges, HEAD, conditional requests
}

func (s *Server) sha256File(w http.ResponseWriter, r *http.Request, name string) {
	f, fi, err := s.open(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer func() { _ = f.Close() }()
	sum, err := s.digest(name, f, fi)
	if err != nil {
		http.Error(w, "failed to read artifact", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "%s  %s\n", hex.EncodeToString(sum[:]), path.Base(name))
}

// open opens a regular file inside the artifacts root (os.Root: no "..", no symlinks out).
func (s *Server) open(name string) (*os.File, fs.FileInfo, error) {
	if name == "" || strings.Contains(name, "\x00") {
		return nil, nil, fs.ErrNotExist
	}
	f, err := s.root.Open(name)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, fs.ErrNotExist
	}
	return f, fi, nil
}

// digest returns the file's SHA-256, computed once per (size, mtime).
func (s *Server) digest(name string, f *os.File, fi fs.FileInfo) ([sha256.Size]byte, error) {
	s.mu.Lock()
	d, ok := s.sums[name]
	s.mu.Unlock()
	if ok && d.size == fi.Size() && d.mtime.Equal(fi.ModTime()) {
		return d.sum, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, fi.Size())); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("failed to hash artifact %s: %w", name, err)
	}
	d = digest{size: fi.Size(), mtime: fi.ModTime()}
	copy(d.sum[:], h.Sum(nil))
	s.mu.Lock()
	s.sums[name] = d
	s.mu.Unlock()
	return d.sum, nil
}

type countingWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (c *countingWriter) WriteHeader(code int) { c.code = code; c.ResponseWriter.WriteHeader(code) }
func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.bytes += int64(n)
	return n, err
}

// ReadFrom keeps sendfile(2) for artifacts while counting.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(r)
		c.bytes += n
		return n, err
	}
	n, err := io.Copy(struct{ io.Writer }{c.ResponseWriter}, r)
	c.bytes += n
	return n, err
}

func (s *Server) counted(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(cw, r)
		s.metrics.Requests.WithLabelValues(name, strconv.Itoa(cw.code)).Inc()
		s.metrics.Bytes.WithLabelValues(name).Add(float64(cw.bytes))
	})
}
