package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
)

// Metrics are the server's Prometheus metrics.
type Metrics struct {
	Requests *prometheus.CounterVec
	Latency  prometheus.Histogram
}

// NewMetrics registers the DHCP metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "yonder_metal_dhcp_requests_total",
			Help: "DHCP requests by outcome (offer, ack, nak, proxy_offer, proxy_ack, ignored_*).",
		}, []string{"outcome"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "yonder_metal_dhcp_reply_seconds",
			Help:    "Time from receiving a request to sending its reply.",
			Buckets: prometheus.ExponentialBuckets(0.00002, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Latency)
	}
	return m
}

// Server serves DHCP (and, in proxyDHCP mode, the PXE boot-server port) on real sockets.
type Server struct {
	responder *Responder
	cfg       Config
	log       logr.Logger
	metrics   *Metrics
}

// NewServer returns a server; Serve opens its sockets.
func NewServer(cfg Config, lookup inventory.Lookup, log logr.Logger, metrics *Metrics) (*Server, error) {
	r, err := NewResponder(cfg, lookup)
	if err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Server{responder: r, cfg: r.cfg, log: log, metrics: metrics}, nil
}

// Listener is an open server socket.
type Listener struct {
	conn  *net.UDPConn
	proxy bool
}

// Listen opens the server's sockets (bound to the interface when one is configured). Serve them with Serve.
func (s *Server) Listen() ([]Listener, error) {
	conn, err := server4.NewIPv4UDPConn(s.cfg.Interface, net.UDPAddrFromAddrPort(s.cfg.ListenAddr))
	if err != nil {
		return nil, fmt.Errorf("failed to listen for DHCP on %s (interface %q): %w", s.cfg.ListenAddr, s.cfg.Interface, err)
	}
	ls := []Listener{{conn: conn}}
	if s.cfg.ProxyDHCP {
		pc, err := server4.NewIPv4UDPConn(s.cfg.Interface, net.UDPAddrFromAddrPort(s.cfg.ProxyListenAddr))
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("failed to listen for proxyDHCP on %s: %w", s.cfg.ProxyListenAddr, err)
		}
		ls = append(ls, Listener{conn: pc, proxy: true})
	}
	return ls, nil
}

// ListenAndServe opens the sockets and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ls, err := s.Listen()
	if err != nil {
		return err
	}
	return s.Serve(ctx, ls)
}

// Serve answers requests on ls until ctx ends, then closes them.
func (s *Server) Serve(ctx context.Context, ls []Listener) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(ls))
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.serveConn(ctx, l)
		}()
	}
	<-ctx.Done()
	for _, l := range ls {
		_ = l.conn.Close()
	}
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		if e != nil {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
}

func (s *Server) serveConn(ctx context.Context, l Listener) error {
	buf := make([]byte, 4096)
	for {
		n, peer, err := l.conn.ReadFromUDP(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("failed to read DHCP request: %w", err)
		}
		start := time.Now()
		s.handle(l, buf[:n], peer, start)
	}
}

func (s *Server) handle(l Listener, data []byte, peer *net.UDPAddr, start time.Time) {
	req, err := dhcpv4.FromBytes(data)
	if err != nil {
		s.metrics.Requests.WithLabelValues(string(OutcomeMalformed)).Inc()
		s.log.V(4).Info("Ignoring malformed DHCP packet", "peer", peer.String(), "error", err.Error())
		return
	}
	rep, outcome, host := s.responder.Respond(req, peer, l.proxy)
	s.metrics.Requests.WithLabelValues(string(outcome)).Inc()
	if rep == nil {
		if host == nil {
			s.log.V(4).Info("Ignoring DHCP request", "mac", req.ClientHWAddr.String(), "outcome", string(outcome))
		} else {
			s.log.V(4).Info("Ignoring DHCP request", "host", host.Name, "outcome", string(outcome))
		}
		return
	}
	if _, err := l.conn.WriteToUDP(rep.Packet.ToBytes(), rep.To); err != nil {
		s.log.Error(err, "Failed to send DHCP reply", "host", host.Name, "to", rep.To.String())
		return
	}
	s.metrics.Latency.Observe(time.Since(start).Seconds())
	s.log.V(2).Info("Answering DHCP request", "host", host.Name, "outcome", string(outcome),
		"address", rep.Packet.YourIPAddr.String(), "bootFile", rep.Packet.BootFileNameOption())
}

// Addr is the socket's local address.
func (l Listener) Addr() *net.UDPAddr { return l.conn.LocalAddr().(*net.UDPAddr) }
