// Package haproxy runs HAProxy (Debian's `haproxy` package) as the load balancer an operator puts in front
// of a kubeadm control plane: one TCP frontend, and a backend per control-plane-capable host checked the way
// kubeadm's high-availability guide checks them (HTTPS GET /healthz, status 200), so that connections go
// only to API servers that answer. The address it listens on is what the operator gives a Cluster as its
// control-plane endpoint (docs/compatibility.md).
//
// Usage:
//
//	lb, err := haproxy.Start(ctx, haproxy.Options{Host: net.Gateway.String(), Backends: []string{"10.250.3.2:6443", …}})
//	defer lb.Stop()
//	// lb.Host, lb.Port: the control-plane endpoint
package haproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// Binary is the load balancer the package runs: Debian's, installed by hack/test-bins.sh (DEB_PACKAGES).
const Binary = "haproxy"

// Options say where the load balancer listens and what it balances.
type Options struct {
	// Host is the address it listens on (default 127.0.0.1); hosts on a lab network reach the network's
	// gateway address.
	Host string
	// Port is the port it listens on (default: a free one).
	Port int
	// Backends are the API servers' host:port addresses.
	Backends []string
	// Dir holds the configuration and haproxy.log (default: a new temporary directory, removed by Stop).
	Dir string
}

// LoadBalancer is a running HAProxy.
type LoadBalancer struct {
	// Host and Port are where it listens: the control-plane endpoint.
	Host string
	Port int
	// Dir holds its configuration and log.
	Dir string

	ownDir  bool
	process *proc.Process
}

// Start runs HAProxy in the foreground and returns once it accepts connections. A missing binary is an
// error naming the Debian package.
func Start(ctx context.Context, opts Options) (_ *LoadBalancer, rerr error) {
	bin, err := testbins.LookPath(Binary)
	if err != nil {
		return nil, err
	}
	if len(opts.Backends) == 0 {
		return nil, errors.New("a load balancer needs at least one backend")
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		if opts.Port, err = proc.FreePort(opts.Host); err != nil {
			return nil, err
		}
	}
	lb := &LoadBalancer{Host: opts.Host, Port: opts.Port, Dir: opts.Dir}
	if lb.Dir == "" {
		if lb.Dir, err = os.MkdirTemp("", "yonder-haproxy-"); err != nil {
			return nil, fmt.Errorf("failed to create the HAProxy directory: %w", err)
		}
		lb.ownDir = true
	}
	defer func() {
		if rerr != nil {
			_ = lb.Stop()
		}
	}()
	cfg := filepath.Join(lb.Dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(config(lb.Address(), opts.Backends)), 0o600); err != nil {
		return nil, fmt.Errorf("failed to write the HAProxy configuration: %w", err)
	}
	// -db: stay in the foreground, so that the process is the one Stop signals; -f: only our configuration.
	lb.process, err = proc.Start("haproxy", lb.Dir, nil, bin, "-db", "-f", cfg)
	if err != nil {
		return nil, err
	}
	if err := lb.process.WaitFor(ctx, 30*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", lb.Address())
		if err == nil {
			_ = c.Close()
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("failed to start HAProxy: %w", err)
	}
	return lb, nil
}

// config is kubeadm's high-availability guide's HAProxy configuration, with checks frequent enough that
// a control-plane host that goes away is out of the rotation within seconds.
func config(bind string, backends []string) string {
	var b strings.Builder
	b.WriteString(`global
    log stderr format raw local0 notice
defaults
    mode tcp
    log global
    option tcplog
    retries 1
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend apiserver
    bind ` + bind + `
    default_backend apiserver
backend apiserver
    option httpchk
    http-check connect ssl
    http-check send meth GET uri /healthz
    http-check expect status 200
    balance roundrobin
`)
	for i, be := range backends {
		fmt.Fprintf(&b, "    server apiserver%d %s check verify none inter 1s fall 2 rise 1\n", i, be)
	}
	return b.String()
}

// Address is host:port.
func (lb *LoadBalancer) Address() string {
	return net.JoinHostPort(lb.Host, strconv.Itoa(lb.Port))
}

// Log returns the last n lines HAProxy wrote (backends going up and down).
func (lb *LoadBalancer) Log(n int) string {
	if lb.process == nil {
		return ""
	}
	return lb.process.Tail(n)
}

// Stop stops HAProxy and removes its directory when Start created it.
func (lb *LoadBalancer) Stop() error {
	var errs []error
	if lb.process != nil {
		errs = append(errs, lb.process.Stop(10*time.Second))
	}
	if lb.ownDir && os.Getenv("YONDER_KEEP_TEST_DIRS") == "" {
		errs = append(errs, os.RemoveAll(lb.Dir))
	}
	return errors.Join(errs...)
}
