// Package redfish is the host controller's narrow view of a BMC: connect (with the BMC's TLS certificate
// pinned), read power state and inventory, power on/off/cycle, and set a one-time PXE boot. The real
// implementation uses gofish; tests run it against the emulator in test/redfishsim and against DMTF's
// reference mockup, so the client is not tuned to one implementation's JSON.
package redfish

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Address is a parsed BareMetalHost spec.bmc.address in Metal3's redfish form.
type Address struct {
	// Endpoint is the service's base URL (scheme://host:port).
	Endpoint string
	// SystemPath is the ComputerSystem's URI, e.g. /redfish/v1/Systems/1; empty means "the only system".
	SystemPath string
}

// ParseAddress accepts Metal3's Redfish BMC address forms: redfish://, redfish+https:// (both HTTPS) and
// redfish+http://, with the system's path (/redfish/v1/Systems/<id>). Other drivers (ipmi://, idrac://,
// ilo5://…) are refused: Yonder speaks Redfish only.
func ParseAddress(address string) (Address, error) {
	u, err := url.Parse(address)
	if err != nil {
		return Address{}, fmt.Errorf("failed to parse BMC address %q: %w", address, err)
	}
	scheme := ""
	switch u.Scheme {
	case "redfish", "redfish+https":
		scheme = "https"
	case "redfish+http":
		scheme = "http"
	default:
		return Address{}, fmt.Errorf("BMC address %q: driver %q is not supported; use redfish://, redfish+https:// or redfish+http://", address, u.Scheme)
	}
	if u.Host == "" {
		return Address{}, fmt.Errorf("BMC address %q has no host", address)
	}
	if u.User != nil {
		return Address{}, errors.New("BMC address carries credentials: put them in the Secret named by spec.bmc.credentialsName")
	}
	p := strings.TrimRight(u.Path, "/")
	if p != "" && !strings.HasPrefix(p, "/redfish/v1/Systems/") {
		return Address{}, fmt.Errorf("BMC address %q: path %q is not a Redfish ComputerSystem (/redfish/v1/Systems/<id>)", address, p)
	}
	return Address{Endpoint: scheme + "://" + u.Host, SystemPath: p}, nil
}

// Config is how to reach one BMC.
type Config struct {
	Address Address
	// Username and Password come from the host's credentials Secret.
	Username string
	Password string
	// BasicAuth sends the credentials with every request instead of opening a Redfish session.
	BasicAuth bool
	// PinnedCertSHA256 is the hex SHA-256 of the BMC's leaf certificate recorded on first contact; empty
	// means "first contact": any certificate is accepted and reported in Client.CertSHA256.
	PinnedCertSHA256 string
	// Timeout bounds each HTTP request (default 30s).
	Timeout time.Duration
}

// ErrCertificateMismatch is returned (wrapped) when the BMC presents a certificate other than the pinned one.
var ErrCertificateMismatch = errors.New("BMC certificate does not match the pinned certificate")

// ErrUnauthorized is returned (wrapped) when the BMC rejects the credentials.
var ErrUnauthorized = errors.New("BMC rejected the credentials")

// PowerAction is a power change.
type PowerAction string

// Power actions, mapped to Redfish ResetTypes.
const (
	PowerOn    PowerAction = "On"
	PowerOff   PowerAction = "ForceOff"
	PowerCycle PowerAction = "ForceRestart"
	// PowerSoftOff asks the operating system to shut down (ACPI power button). The BMC accepts it at once
	// whether or not the OS obeys; the caller watches the power state and falls back to PowerOff.
	PowerSoftOff PowerAction = "GracefulShutdown"
)

// BootMode is the firmware mode a boot override asks for (Redfish BootSourceOverrideMode).
type BootMode string

// Boot modes. BootModeCurrent sends no mode: the system boots in the mode it is set to.
const (
	BootModeCurrent BootMode = ""
	BootModeUEFI    BootMode = "UEFI"
	BootModeLegacy  BootMode = "Legacy"
)

// System is the power and boot state of a ComputerSystem.
type System struct {
	ID        string
	PoweredOn bool
	// BootOverride is BootSourceOverrideTarget when BootSourceOverrideEnabled is not Disabled.
	BootOverride string
}

// Inventory is what inspection learns from the BMC.
type Inventory struct {
	Manufacturer, Model, SerialNumber string
	BIOSVersion                       string
	// Hostname is the system's HostName as the BMC knows it from the running OS (empty when it does not).
	Hostname  string
	CPU       CPU
	MemoryMiB int
	NICs      []NIC
	Disks     []Disk
	GPUs      []GPU
}

// CPU summarises the host's processors (GPUs excluded).
type CPU struct {
	Arch, Model string
	Count       int // logical threads, as Metal3 counts them
	MaxSpeedMHz int
	SocketCount int
}

// NIC is one Ethernet interface.
type NIC struct {
	Name, MAC string
	SpeedGbps int
	// IPs are the interface's usable addresses as the BMC reports them (IPv4 first; unspecified, loopback
	// and link-local addresses left out). BMCs that learn them from the OS or from a shared LOM fill them;
	// many report none.
	IPs []string
}

// Disk is one drive.
type Disk struct {
	Name, Model, Vendor, SerialNumber, WWN string
	SizeBytes                              int64
	MediaType                              string // HDD, SSD
}

// GPU is one graphics/compute accelerator.
type GPU struct {
	Name, Vendor, Model string
}

// Client talks to one BMC. Implementations are not required to be safe for concurrent use.
type Client interface {
	// CertSHA256 is the hex SHA-256 of the certificate the BMC presented (empty over plain HTTP).
	CertSHA256() string
	// System is the power and boot state: read from the BMC, unless it was read since the client's last
	// change (power action, boot override) and since Reuse.
	System(ctx context.Context) (*System, error)
	Inventory(ctx context.Context) (*Inventory, error)
	Power(ctx context.Context, action PowerAction) error
	// SetOneTimePXEBoot makes the next boot (only) boot from the network, in the firmware mode given
	// (BootModeCurrent keeps the system's).
	SetOneTimePXEBoot(ctx context.Context, mode BootMode) error
	// SetDiskBoot makes every boot from now on boot the local disk (a persistent override, as Ironic sets
	// after writing an image), until the next one-time PXE boot.
	SetDiskBoot(ctx context.Context, mode BootMode) error
	// SetNetworkBoot makes every boot from now on boot from the network (a persistent PXE override, as
	// Ironic sets for an iPXE-booted live ISO), until the next one-time PXE boot or disk boot.
	SetNetworkBoot(ctx context.Context, mode BootMode) error
	// Reuse readies a client kept from an earlier reconcile for another: its idle connections are closed,
	// so the next request verifies the BMC's certificate again (the pin), and System reads the system
	// again. The Redfish session, if any, is kept: that is the point of keeping the client.
	Reuse()
	// Close ends the session.
	Close()
}

// Dialer opens a Client; the controller takes one so tests and benchmarks can count or wrap connections.
type Dialer func(ctx context.Context, cfg Config) (Client, error)

// Dial is the gofish Dialer.
func Dial(ctx context.Context, cfg Config) (Client, error) {
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	c := &gofishClient{cfg: cfg}
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// BMCs ship self-signed certificates; trust is the pin below, not a CA chain.
			InsecureSkipVerify: true, //nolint:gosec // verified by VerifyConnection against the pin
			VerifyConnection:   c.verify,
		},
		TLSHandshakeTimeout: timeout,
		DisableKeepAlives:   false,
		MaxIdleConnsPerHost: 2,
		// A client may be kept between reconciles (its session reused) for minutes: its connections are
		// not, so thousands of kept clients hold no sockets.
		IdleConnTimeout: 30 * time.Second,
	}
	c.transport = transport
	c.budget.Store(maxRequestsPerCall)
	api, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
		Endpoint:          cfg.Address.Endpoint,
		Username:          cfg.Username,
		Password:          cfg.Password,
		BasicAuth:         cfg.BasicAuth,
		HTTPClient:        &http.Client{Transport: budgetTransport{next: meteredTransport{next: transport}, budget: &c.budget}, Timeout: timeout},
		NoModifyTransport: true,
		ReuseConnections:  true,
	})
	if err != nil {
		transport.CloseIdleConnections()
		return nil, c.classify("connect to", err)
	}
	c.api = api
	return c, nil
}

// maxRequestsPerCall bounds the HTTP requests of one call of the Client (a dial, a system read, an
// inventory…). gofish follows Members@odata.nextLink without end, so a BMC whose collection pages loop
// would otherwise keep the controller reading forever; a real server's inventory takes a few hundred.
const maxRequestsPerCall = 4096

// errTooManyRequests is what a call gets once it spent its request budget.
var errTooManyRequests = fmt.Errorf("more than %d requests in one read: the BMC's collection pages (Members@odata.nextLink) loop or it lists too many members", maxRequestsPerCall)

// budgetTransport refuses requests once the current call's budget is spent.
type budgetTransport struct {
	next   http.RoundTripper
	budget *atomic.Int64
}

func (t budgetTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.budget.Add(-1) < 0 {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, errTooManyRequests
	}
	return t.next.RoundTrip(r)
}

type gofishClient struct {
	cfg       Config
	api       *gofish.APIClient
	transport *http.Transport
	// budget is how many more requests the current call may send.
	budget   atomic.Int64
	mu       sync.Mutex
	seen     string
	mismatch bool
	sys      *schemas.ComputerSystem
	// fresh is true while sys is as read in this pass and the client changed nothing since (no reset, no
	// boot override): System then answers from it instead of reading the system again.
	fresh bool
}

func (c *gofishClient) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("BMC presented no certificate")
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	got := hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = got
	if c.cfg.PinnedCertSHA256 != "" && !strings.EqualFold(c.cfg.PinnedCertSHA256, got) {
		c.mismatch = true
		return fmt.Errorf("%w: pinned sha256 %s, presented %s", ErrCertificateMismatch, c.cfg.PinnedCertSHA256, got)
	}
	return nil
}

// classify turns gofish/transport errors into the package's sentinel errors where they apply.
func (c *gofishClient) classify(what string, err error) error {
	c.mu.Lock()
	mismatch, seen := c.mismatch, c.seen
	c.mu.Unlock()
	if mismatch {
		return fmt.Errorf("failed to %s BMC %s: %w: pinned sha256 %s, presented %s", what, c.cfg.Address.Endpoint,
			ErrCertificateMismatch, c.cfg.PinnedCertSHA256, seen)
	}
	var rerr *schemas.Error
	if errors.As(err, &rerr) && (rerr.HTTPReturnedStatusCode == http.StatusUnauthorized || rerr.HTTPReturnedStatusCode == http.StatusForbidden) {
		return fmt.Errorf("failed to %s BMC %s: %w (HTTP %d)", what, c.cfg.Address.Endpoint, ErrUnauthorized, rerr.HTTPReturnedStatusCode)
	}
	return fmt.Errorf("failed to %s BMC %s: %w", what, c.cfg.Address.Endpoint, err)
}

func (c *gofishClient) CertSHA256() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

func (c *gofishClient) Reuse() {
	c.transport.CloseIdleConnections()
	c.budget.Store(maxRequestsPerCall)
	c.fresh = false
}

func (c *gofishClient) Close() {
	c.budget.Store(maxRequestsPerCall)
	if c.api != nil && !c.cfg.BasicAuth {
		c.api.Logout()
	}
	c.transport.CloseIdleConnections()
}

// system finds (once per client) the ComputerSystem the address names, or the only one there is.
func (c *gofishClient) system() (*schemas.ComputerSystem, error) {
	if c.sys != nil {
		return c.sys, nil
	}
	if c.cfg.Address.SystemPath != "" {
		s, err := schemas.GetComputerSystem(c.api, c.cfg.Address.SystemPath)
		if err != nil {
			return nil, c.classify("read system "+c.cfg.Address.SystemPath+" from", err)
		}
		c.sys, c.fresh = s, true
		return s, nil
	}
	systems, err := c.api.Service.Systems()
	if err != nil {
		return nil, c.classify("list systems of", err)
	}
	if len(systems) != 1 {
		return nil, fmt.Errorf("BMC %s has %d systems: name one in the address (redfish://host/redfish/v1/Systems/<id>)", c.cfg.Address.Endpoint, len(systems))
	}
	c.sys, c.fresh = systems[0], true
	return c.sys, nil
}

func (c *gofishClient) System(_ context.Context) (*System, error) {
	c.budget.Store(maxRequestsPerCall)
	s, err := c.system()
	if err != nil {
		return nil, err
	}
	if !c.fresh {
		// Re-read: power and boot state change underneath us.
		if s, err = schemas.GetComputerSystem(c.api, s.ODataID); err != nil {
			return nil, c.classify("read system "+c.sys.ODataID+" from", err)
		}
		c.sys, c.fresh = s, true
	}
	out := &System{ID: s.ID, PoweredOn: s.PowerState == schemas.OnPowerState || s.PowerState == schemas.PoweringOnPowerState}
	if s.Boot.BootSourceOverrideEnabled != "" && s.Boot.BootSourceOverrideEnabled != schemas.DisabledBootSourceOverrideEnabled {
		out.BootOverride = string(s.Boot.BootSourceOverrideTarget)
	}
	return out, nil
}

func (c *gofishClient) Power(_ context.Context, action PowerAction) error {
	c.budget.Store(maxRequestsPerCall)
	s, err := c.system()
	if err != nil {
		return err
	}
	resetType, err := c.resetType(s, action)
	if err != nil {
		return err
	}
	c.fresh = false // the power state changes
	// gofish sends the system's ETag with the action too; a BMC that checks it there answers 412 when the
	// system changed since it was read, and gofish repeats the action without If-Match itself
	// (TestPowerAfterTheSystemChangedOnAStrictBMC).
	if _, err := s.Reset(resetType); err != nil {
		return c.classify("reset ("+string(resetType)+") system on", err)
	}
	return nil
}

// resetTypes are the Redfish ResetTypes that carry out each power action, best first. BMCs offer different
// subsets (the system's Reset action lists its AllowableValues): some have no ForceRestart but PowerCycle,
// some no On but ForceOn.
var resetTypes = map[PowerAction][]schemas.ResetType{
	PowerOn:    {schemas.OnResetType, schemas.ForceOnResetType},
	PowerOff:   {schemas.ForceOffResetType},
	PowerCycle: {schemas.ForceRestartResetType, schemas.PowerCycleResetType},
	// A power-button press asks a running OS to shut down through ACPI, as GracefulShutdown does.
	PowerSoftOff: {schemas.GracefulShutdownResetType, schemas.PushPowerButtonResetType},
}

// ErrResetTypeNotOffered is returned by Power when the system offers no ResetType for the action; nothing
// was sent to the BMC.
var ErrResetTypeNotOffered = errors.New("the BMC offers no reset type for this power action")

// resetType picks the first ResetType for action that the system offers; a system that lists none is
// assumed to offer the first.
func (c *gofishClient) resetType(s *schemas.ComputerSystem, action PowerAction) (schemas.ResetType, error) {
	want, ok := resetTypes[action]
	if !ok {
		return "", fmt.Errorf("unknown power action %q", action)
	}
	offered, err := s.GetSupportedResetTypes()
	if err != nil {
		return "", c.classify("read the reset types of", err)
	}
	if len(offered) == 0 {
		return want[0], nil
	}
	for _, t := range want {
		if slices.Contains(offered, t) {
			return t, nil
		}
	}
	return "", fmt.Errorf("%w: BMC %s offers the reset types %v, none of %v that %s needs", ErrResetTypeNotOffered, c.cfg.Address.Endpoint, offered, want, action)
}

func (c *gofishClient) SetOneTimePXEBoot(_ context.Context, mode BootMode) error {
	return c.setBoot("set one-time PXE boot on", mode, &schemas.Boot{
		BootSourceOverrideTarget:  schemas.PxeBootSource,
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled,
	})
}

func (c *gofishClient) SetDiskBoot(_ context.Context, mode BootMode) error {
	return c.setBoot("set persistent disk boot on", mode, &schemas.Boot{
		BootSourceOverrideTarget:  schemas.HddBootSource,
		BootSourceOverrideEnabled: schemas.ContinuousBootSourceOverrideEnabled,
	})
}

func (c *gofishClient) SetNetworkBoot(_ context.Context, mode BootMode) error {
	return c.setBoot("set persistent PXE boot on", mode, &schemas.Boot{
		BootSourceOverrideTarget:  schemas.PxeBootSource,
		BootSourceOverrideEnabled: schemas.ContinuousBootSourceOverrideEnabled,
	})
}

// preconditionFailed reports whether the BMC refused a change because the client's If-Match (gofish sends
// the ETag of its last read of the system) names an older version of the system.
func preconditionFailed(err error) bool { return schemas.Is412PreconditionFailed(err) }

// reread reads the system again for a change that is then repeated; the system is not fresh, as the
// change is still to come.
func (c *gofishClient) reread() (*schemas.ComputerSystem, error) {
	s, err := schemas.GetComputerSystem(c.api, c.sys.ODataID)
	if err != nil {
		return nil, c.classify("read system "+c.sys.ODataID+" from", err)
	}
	c.sys, c.fresh = s, false
	return s, nil
}

// setBoot PATCHes the boot override. gofish sends the ETag of the system as last read in If-Match, and a
// BMC that checks it answers 412 when the system changed since (a power action of ours or anyone's, the
// host powering itself off): the system is then read again and the PATCH repeated, once.
func (c *gofishClient) setBoot(what string, mode BootMode, b *schemas.Boot) error {
	c.budget.Store(maxRequestsPerCall)
	s, err := c.system()
	if err != nil {
		return err
	}
	// The mode goes with the override only to a system that publishes one: a BMC without
	// BootSourceOverrideMode refuses the property (PropertyUnknown), and boots in the mode it is set to.
	if mode != BootModeCurrent && s.Boot.BootSourceOverrideMode != "" {
		b.BootSourceOverrideMode = schemas.BootSourceOverrideMode(mode)
	}
	c.fresh = false // the boot override changes
	err = s.SetBoot(b)
	if preconditionFailed(err) {
		if s, err = c.reread(); err != nil {
			return err
		}
		err = s.SetBoot(b)
	}
	if err != nil {
		return c.classify(what, err)
	}
	return nil
}

// ProbeCertificate returns the hex SHA-256 of the certificate the BMC presents, without sending any
// credentials, so that the pin can be recorded before the credentials ever travel to that BMC. It
// returns "" for plain-HTTP addresses.
func ProbeCertificate(ctx context.Context, addr Address, timeout time.Duration) (string, error) {
	u, err := url.Parse(addr.Endpoint)
	if err != nil {
		return "", fmt.Errorf("failed to parse endpoint %s: %w", addr.Endpoint, err)
	}
	if u.Scheme != "https" {
		return "", nil
	}
	host := u.Host
	if u.Port() == "" {
		host += ":443"
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	d := &tls.Dialer{Config: &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}} //nolint:gosec // reading the certificate to pin it
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return "", fmt.Errorf("failed to connect to BMC %s: %w", addr.Endpoint, err)
	}
	defer func() { _ = conn.Close() }()
	cs := conn.(*tls.Conn).ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return "", fmt.Errorf("BMC %s presented no certificate", addr.Endpoint)
	}
	sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
	return hex.EncodeToString(sum[:]), nil
}
