// Package redfishsim is a Redfish BMC emulator for tests and benchmarks: one HTTPS server (its own
// self-signed certificate, replaceable to simulate a BMC whose certificate changed) serving any number of
// ComputerSystems with inventory (Processors incl. GPUs, Memory, EthernetInterfaces, Storage/Drives,
// PCIeDevices), Managers, SessionService (X-Auth-Token sessions) and HTTP Basic auth,
// ComputerSystem.Reset and a one-time boot override. What a power action does is a PowerDriver: the
// QEMU driver starts and stops a VM that PXE-boots or boots its disk, with a software TPM, the memory driver only flips
// state (scale tests).
//
// It implements the subset of DMTF Redfish that BMCs commonly expose and that Yonder's client uses, and it
// refuses what a BMC refuses (validate.go: read-only and unknown properties, values outside the published
// AllowableValues, stale If-Match ETags, unknown action parameters), so a client that passes here is not
// merely tolerated; its documents are checked against DMTF's mockup of a real server, against which the
// client is tested too, so it is not tuned to this emulator's JSON.
package redfishsim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/yonder-dev/yonder/test/testpki"
)

// PowerDriver carries out power changes of one system. bootTarget is the boot override's target when one
// is in force ("Pxe" network, "Hdd" disk, "Cd" optical), "" for the normal boot order.
type PowerDriver interface {
	PowerOn(ctx context.Context, systemID, bootTarget string) error
	PowerOff(ctx context.Context, systemID string) error
}

// PowerStater is optionally implemented by a PowerDriver whose machines can turn themselves off (a VM
// that powers down): the emulator then reports the machine's real state, as a BMC does.
type PowerStater interface {
	Running(systemID string) bool
}

// CPU is one processor socket.
type CPU struct {
	Model              string
	Cores, Threads     int
	MaxSpeedMHz        int
	InstructionSetX864 bool
}

// GPU is one accelerator, published as a GPU Processor and as a PCIe device.
type GPU struct {
	Vendor, Model string
}

// NIC is one Ethernet interface.
type NIC struct {
	ID, MAC   string
	SpeedMbps int
	// IPs the BMC reports for the interface (as BMCs that learn them from the OS do); none by default.
	IPs []string
}

// Disk is one drive.
type Disk struct {
	ID, Model, Vendor, Serial, WWN string
	SizeBytes                      int64
	MediaType                      string
}

// SystemSpec describes one emulated server.
type SystemSpec struct {
	ID                                string
	Manufacturer, Model, SerialNumber string
	// Hostname is the HostName the BMC reports (learnt from the OS); empty by default, as on many BMCs.
	Hostname    string
	BIOSVersion string
	// ResetTypes are the ResetTypes the system's Reset action offers (default DefaultResetTypes); BMCs
	// differ (some have PowerCycle but no ForceRestart, some ForceOn but no On).
	ResetTypes []string
	CPUs       []CPU
	GPUs       []GPU
	DIMMsMiB   []int
	NICs       []NIC
	Disks      []Disk
}

// DefaultSystem is a small x86 server with one NIC of the given MAC.
func DefaultSystem(id, mac string) SystemSpec {
	return SystemSpec{
		ID: id, Manufacturer: "Yonder Emulated", Model: "Sim-1U", SerialNumber: "SN-" + id, BIOSVersion: "1.0.0",
		CPUs:     []CPU{{Model: "Emulated x86 CPU", Cores: 4, Threads: 8, MaxSpeedMHz: 2400, InstructionSetX864: true}},
		DIMMsMiB: []int{8192, 8192},
		NICs:     []NIC{{ID: "nic0", MAC: mac, SpeedMbps: 10000}},
		Disks:    []Disk{{ID: "disk0", Model: "Emulated NVMe", Vendor: "Yonder", Serial: "D-" + id, SizeBytes: 64 << 30, MediaType: "SSD", WWN: "0x5000000000000001"}},
	}
}

// DefaultResetTypes are the ResetTypes a system offers unless its spec names others.
var DefaultResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle"}

type system struct {
	spec          SystemSpec
	poweredOn     bool
	overrideOn    string // Disabled, Once, Continuous
	overrideTgt   string
	overrideMode  string // Legacy, UEFI
	pxeBoots      int
	requests      atomic.Int64
	lastBootTaget string
}

// Options configure a Server.
type Options struct {
	// Username and Password are the only accepted credentials.
	Username, Password string
	// Driver carries out power actions (default: MemoryDriver).
	Driver PowerDriver
	// Plain serves HTTP instead of HTTPS.
	Plain bool
	// Listener, when set, is served instead of a fresh loopback listener (e.g. an address in a namespace).
	Listener net.Listener
	// IfMatchOnActions makes actions (Reset) honour If-Match as PATCH does, as some BMCs do.
	IfMatchOnActions bool
}

// Server is a running emulator.
type Server struct {
	opts     Options
	srv      *http.Server
	ln       net.Listener
	mu       sync.Mutex
	systems  map[string]*system
	sessions map[string]string // token → session id
	nextSess int               // sessions ever opened
	cert     atomic.Pointer[tls.Certificate]
	total    atomic.Int64
	// recent holds the last requests served ("METHOD path"), for tests that count requests to say which.
	recentMu sync.Mutex
	recent   []string
	// failPower, when set, makes Reset fail (a BMC that errors).
	failPower atomic.Bool
}

// Start serves the emulator on loopback (or opts.Listener) until Close.
func Start(opts Options) (*Server, error) {
	if opts.Driver == nil {
		opts.Driver = NewMemoryDriver()
	}
	s := &Server{opts: opts, systems: map[string]*system{}, sessions: map[string]string{}}
	// Clients that only read the certificate (to pin it) hang up mid-handshake: not worth a log line.
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("failed to listen for the Redfish emulator: %w", err)
		}
	}
	s.ln = ln
	if !opts.Plain {
		if err := s.RotateCertificate(); err != nil {
			_ = ln.Close()
			return nil, err
		}
		// GetCertificate on every handshake, so RotateCertificate takes effect for new connections.
		ln = tls.NewListener(ln, &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil },
		})
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// RotateCertificate replaces the server's certificate with a fresh self-signed one, as a BMC does after a
// factory reset or a firmware update — or as an impostor would.
func (s *Server) RotateCertificate() error {
	cert, err := testpki.SelfSigned(testpki.Leaf{CommonName: "redfishsim", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		Server: true, Validity: 24 * time.Hour})
	if err != nil {
		return fmt.Errorf("failed to create the emulator's certificate: %w", err)
	}
	s.cert.Store(cert)
	return nil
}

// CertSHA256 is the hex SHA-256 of the current certificate.
func (s *Server) CertSHA256() string {
	c := s.cert.Load()
	if c == nil {
		return ""
	}
	sum := sha256.Sum256(c.Certificate[0])
	return hex.EncodeToString(sum[:])
}

// Host is host:port of the server.
func (s *Server) Host() string { return s.ln.Addr().String() }

// Address is the Metal3 BMC address of a system.
func (s *Server) Address(id string) string {
	scheme := "redfish"
	if s.opts.Plain {
		scheme = "redfish+http"
	}
	return scheme + "://" + s.Host() + "/redfish/v1/Systems/" + id
}

// Close stops the server.
func (s *Server) Close() { _ = s.srv.Close() }

// AddSystem adds a powered-off system.
func (s *Server) AddSystem(spec SystemSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.systems[spec.ID] = &system{spec: spec, overrideOn: "Disabled", overrideTgt: "None", overrideMode: "Legacy"}
}

// SystemState is a snapshot of a system's power and boot state.
type SystemState struct {
	PoweredOn bool
	// PXEBoots counts power-ons that booted from the network: a one-time PXE override (consumed) or a
	// persistent one (a live ISO host's every boot).
	PXEBoots int
	// Override is the boot override in force ("Pxe" when a one-time or persistent PXE boot is set, "Hdd"
	// for a persistent disk boot).
	Override string
	// BootMode is the firmware mode boots use (BootSourceOverrideMode: "Legacy" or "UEFI").
	BootMode string
	Requests int64
}

// State returns a system's state.
func (s *Server) State(id string) SystemState {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys, ok := s.systems[id]
	if !ok {
		return SystemState{}
	}
	st := SystemState{PoweredOn: sys.poweredOn, PXEBoots: sys.pxeBoots, Requests: sys.requests.Load(), BootMode: sys.overrideMode}
	if sys.overrideOn != "Disabled" {
		st.Override = sys.overrideTgt
	}
	return st
}

// SetPowerFailure makes every Reset fail with HTTP 500 while on.
func (s *Server) SetPowerFailure(on bool) { s.failPower.Store(on) }

// TotalRequests counts every HTTP request served.
func (s *Server) TotalRequests() int64 { return s.total.Load() }

// recentRequests bounds RecentRequests' memory on a benchmark's busy emulator.
const recentRequests = 256

// RecentRequests returns the last requests served (up to 256), oldest first, as "METHOD path".
func (s *Server) RecentRequests() []string {
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	return append([]string(nil), s.recent...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.total.Add(1)
	s.recentMu.Lock()
	if len(s.recent) == recentRequests {
		s.recent = append(s.recent[:0], s.recent[1:]...)
	}
	s.recent = append(s.recent, r.Method+" "+r.URL.Path)
	s.recentMu.Unlock()
	path := strings.TrimRight(r.URL.Path, "/")
	if path == "/redfish" {
		writeJSON(w, http.StatusOK, map[string]any{"v1": "/redfish/v1/"})
		return
	}
	// The service root is readable without credentials (Redfish spec), everything else is not.
	if path == "/redfish/v1" {
		s.serviceRoot(w)
		return
	}
	if path == "/redfish/v1/SessionService/Sessions" && r.Method == http.MethodPost {
		s.createSession(w, r)
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="redfishsim"`)
		writeError(w, http.StatusUnauthorized, "Base.1.0.NoValidSession", "authentication required")
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, "/redfish/v1/"), "/")
	switch {
	case parts[0] == "SessionService":
		s.sessionService(w, r, parts)
	case parts[0] == "Managers":
		s.managers(w, parts)
	case parts[0] == "Systems" && len(parts) == 1:
		s.collection(w, "/redfish/v1/Systems", "ComputerSystemCollection", s.systemIDs())
	case parts[0] == "Systems":
		s.mu.Lock()
		sys, ok := s.systems[parts[1]]
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no system "+parts[1])
			return
		}
		sys.requests.Add(1)
		s.systemResource(w, r, sys, parts[2:])
	default:
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no resource at "+path)
	}
}

func (s *Server) authorized(r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.sessions[tok]
		return ok
	}
	u, p, ok := r.BasicAuth()
	return ok && u == s.opts.Username && p == s.opts.Password
}

func (s *Server) systemIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.systems))
	for id := range s.systems {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (s *Server) serviceRoot(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id":      "/redfish/v1/",
		"@odata.type":    "#ServiceRoot.v1_15_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Yonder Redfish emulator",
		"RedfishVersion": "1.15.0",
		"UUID":           "00000000-0000-0000-0000-00000000cafe",
		"Systems":        link("/redfish/v1/Systems"),
		"Managers":       link("/redfish/v1/Managers"),
		"SessionService": link("/redfish/v1/SessionService"),
		"Links":          map[string]any{"Sessions": link("/redfish/v1/SessionService/Sessions")},
	})
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	raw, rerr := readBody(w, r, 4096)
	var body struct{ UserName, Password *string }
	if rerr == nil && json.Unmarshal(raw, &body) != nil {
		rerr = badRequest("MalformedJSON", "the session request is not one JSON object")
	}
	if rerr == nil && (body.UserName == nil || body.Password == nil) {
		rerr = badRequest("PropertyMissing", "a session needs the properties UserName and Password")
	}
	if rerr != nil {
		rerr.Write(w)
		return
	}
	if *body.UserName != s.opts.Username || *body.Password != s.opts.Password {
		writeError(w, http.StatusUnauthorized, "Base.1.0.InsufficientPrivilege", "invalid credentials")
		return
	}
	tokRaw := make([]byte, 16)
	_, _ = rand.Read(tokRaw)
	tok := hex.EncodeToString(tokRaw)
	s.mu.Lock()
	s.nextSess++
	id := fmt.Sprintf("%d", s.nextSess)
	s.sessions[tok] = id
	s.mu.Unlock()
	loc := "/redfish/v1/SessionService/Sessions/" + id
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, map[string]any{"@odata.id": loc, "@odata.type": "#Session.v1_3_0.Session", "Id": id, "Name": "Session", "UserName": *body.UserName})
}

func (s *Server) sessionService(w http.ResponseWriter, r *http.Request, parts []string) {
	switch {
	case len(parts) == 1:
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": "/redfish/v1/SessionService", "@odata.type": "#SessionService.v1_1_8.SessionService",
			"Id": "SessionService", "Name": "Session Service", "ServiceEnabled": true, "SessionTimeout": 1800,
			"Sessions": link("/redfish/v1/SessionService/Sessions")})
	case len(parts) == 2:
		s.mu.Lock()
		ids := make([]string, 0, len(s.sessions))
		for _, id := range s.sessions {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		sort.Strings(ids)
		s.collection(w, "/redfish/v1/SessionService/Sessions", "SessionCollection", ids)
	case len(parts) == 3 && r.Method == http.MethodDelete:
		s.mu.Lock()
		for tok, id := range s.sessions {
			if id == parts[2] {
				delete(s.sessions, tok)
			}
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such session resource")
	}
}

// Sessions is the number of open sessions (a client that never logs out leaks them on a real BMC).
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// SessionsOpened counts the sessions ever created.
func (s *Server) SessionsOpened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextSess
}

// ExpireSessions ends every open session, as a BMC does after its SessionTimeout or a reboot: their
// tokens are refused from now on.
func (s *Server) ExpireSessions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.sessions)
}

func (s *Server) managers(w http.ResponseWriter, parts []string) {
	if len(parts) == 1 {
		s.collection(w, "/redfish/v1/Managers", "ManagerCollection", []string{"BMC"})
		return
	}
	if len(parts) == 2 && parts[1] == "BMC" {
		systems := []any{}
		for _, id := range s.systemIDs() {
			systems = append(systems, link("/redfish/v1/Systems/"+id))
		}
		writeJSON(w, http.StatusOK, map[string]any{"@odata.id": "/redfish/v1/Managers/BMC", "@odata.type": "#Manager.v1_10_0.Manager",
			"Id": "BMC", "Name": "Emulated BMC", "ManagerType": "BMC", "FirmwareVersion": "redfishsim-1",
			"Status": map[string]any{"State": "Enabled", "Health": "OK"}, "Links": map[string]any{"ManagerForServers": systems}})
		return
	}
	writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no such manager")
}

func link(p string) map[string]any { return map[string]any{"@odata.id": p} }

func (s *Server) collection(w http.ResponseWriter, base, typ string, ids []string) {
	members := make([]any, 0, len(ids))
	for _, id := range ids {
		members = append(members, link(base+"/"+id))
	}
	writeJSON(w, http.StatusOK, map[string]any{"@odata.id": base, "@odata.type": "#" + typ + "." + typ, "Name": typ,
		"Members": members, "Members@odata.count": len(members)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, id, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"code": id, "message": msg,
		"@Message.ExtendedInfo": []any{map[string]any{"MessageId": id, "Message": msg}}}})
}
