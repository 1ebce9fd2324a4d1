// Package netboot runs the network boot services of one site together — DHCP (or proxyDHCP), TFTP and the
// boot HTTP server with the attestation API — from one configuration, as yonder-metal-manager does.
package netboot

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/attest"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/bootserver"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/dhcp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/tftp"
)

// Config is a site's network boot configuration.
type Config struct {
	// Interface is the boot network interface; ServerIP this machine's address on it.
	Interface string
	ServerIP  netip.Addr
	// HTTPPort (default 8080) and TFTPPort (default 69) are served on ServerIP.
	HTTPPort int
	TFTPPort int
	// HTTPBase overrides the URL hosts use for the boot server (default http://ServerIP:HTTPPort).
	HTTPBase string
	// TFTPRoot holds iPXE binaries (default /usr/lib/ipxe); ArtifactsDir kernels and initrds.
	TFTPRoot     string
	ArtifactsDir string
	// DHCP is the DHCP configuration; Interface, ServerIP and HTTPBase are filled in from above.
	DHCP dhcp.Config
	// DisableDHCP leaves addressing and boot options to another server entirely (TFTP/HTTP only).
	DisableDHCP bool
	// Attestation is the attestation policy.
	Attestation attest.Config
	// LiveISOs serves the verified live ISOs under /live/ (liveiso.Cache.Handler(); nil: none).
	LiveISOs http.Handler
}

// Services are the running services.
type Services struct {
	Attestation *attest.Service
	Boot        *bootserver.Server
	HTTPAddr    *net.TCPAddr
	TFTPAddr    *net.UDPAddr

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

// Start opens every socket (so a port conflict fails here, not later) and serves until Stop.
func Start(ctx context.Context, cfg Config, lookup inventory.Lookup, store attest.Store, reg prometheus.Registerer, log logr.Logger) (*Services, error) {
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = 8080
	}
	if cfg.TFTPPort == 0 {
		cfg.TFTPPort = 69
	}
	httpLn, err := net.Listen("tcp4", net.JoinHostPort(cfg.ServerIP.String(), strconv.Itoa(cfg.HTTPPort)))
	if err != nil {
		return nil, fmt.Errorf("failed to listen for boot HTTP: %w", err)
	}
	if cfg.HTTPBase == "" {
		cfg.HTTPBase = "http://" + httpLn.Addr().String()
	}
	tftpConn, err := net.ListenPacket("udp4", net.JoinHostPort(cfg.ServerIP.String(), strconv.Itoa(cfg.TFTPPort)))
	if err != nil {
		_ = httpLn.Close()
		return nil, fmt.Errorf("failed to listen for TFTP: %w", err)
	}
	closeAll := func() { _ = httpLn.Close(); _ = tftpConn.Close() }
	svc := attest.New(cfg.Attestation, store, log.WithName("attest"), attest.NewMetrics(reg))
	bootCfg := bootserver.Config{BaseURL: cfg.HTTPBase, ArtifactsDir: cfg.ArtifactsDir, Lookup: lookup,
		Tickets: svc, API: svc.Handler(), LiveISOs: cfg.LiveISOs, BindToReservation: !cfg.DisableDHCP && !cfg.DHCP.ProxyDHCP}
	if cfg.Attestation.SigningKey != nil {
		// Hosts boot the public half beside their image: a release's generic boot image needs no rebuild.
		bootCfg.ServerKey = cfg.Attestation.SigningKey.Public().(ed25519.PublicKey)
	}
	boot, err := bootserver.New(bootCfg, log.WithName("http"), bootserver.NewMetrics(reg))
	if err != nil {
		closeAll()
		return nil, err
	}
	tftpSrv, err := tftp.New(tftp.Config{Root: cfg.TFTPRoot}, log.WithName("tftp"), tftp.NewMetrics(reg))
	if err != nil {
		closeAll()
		return nil, err
	}
	var dhcpSrv *dhcp.Server
	var dhcpLs []dhcp.Listener
	if !cfg.DisableDHCP {
		dc := cfg.DHCP
		dc.Interface, dc.ServerIP, dc.HTTPBase = cfg.Interface, cfg.ServerIP, cfg.HTTPBase
		if dhcpSrv, err = dhcp.NewServer(dc, lookup, log.WithName("dhcp"), dhcp.NewMetrics(reg)); err == nil {
			dhcpLs, err = dhcpSrv.Listen()
		}
		if err != nil {
			closeAll()
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Services{Attestation: svc, Boot: boot, HTTPAddr: httpLn.Addr().(*net.TCPAddr), TFTPAddr: tftpConn.LocalAddr().(*net.UDPAddr),
		cancel: cancel, errs: make(chan error, 3)}
	httpSrv := &http.Server{Handler: boot.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.run(func() error {
		go func() { <-ctx.Done(); _ = httpSrv.Close() }()
		if err := httpSrv.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("failed to serve boot HTTP: %w", err)
		}
		return nil
	})
	s.run(func() error { defer func() { _ = tftpSrv.Close() }(); return tftpSrv.Serve(ctx, tftpConn) })
	if dhcpSrv != nil {
		s.run(func() error { return dhcpSrv.Serve(ctx, dhcpLs) })
	}
	return s, nil
}

func (s *Services) run(f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil {
			s.errs <- err
		}
	}()
}

// Stop ends every service and waits for them.
func (s *Services) Stop() error {
	s.cancel()
	s.wg.Wait()
	close(s.errs)
	var errs []error
	for e := range s.errs {
		errs = append(errs, e)
	}
	return errors.Join(append(errs, s.Boot.Close())...)
}
