// Command yonder-net-node is the node dataplane of the Yonder network add-on: WireGuard (kernel or embedded
// wireguard-go), VXLAN, routes, an eBPF pod egress program and BFD-style probes, programmed with diffs from the
// node's view of the route plan.
//
//	yonder-net-node [flags]          run the daemon
//	yonder-net-node debug [--debug-addr A]   print the running daemon's state as JSON
//	yonder-net-node rotate [--debug-addr A]  start a make-before-break WireGuard key rotation
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/apisync"
	"github.com/yonder-dev/yonder/network/internal/dataplane/bpf"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
	"github.com/yonder-dev/yonder/network/internal/metricsauth"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := pflag.NewFlagSet("yonder-net-node", pflag.ContinueOnError)
	var o daemon.Options
	var attach string
	var cleanup, useAPI bool
	var kubeconfig, metricsAddr string
	var resync time.Duration
	fs.StringVar(&o.Node, "node", os.Getenv("NODE_NAME"), "this node's name")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/yonder-net", "directory holding the private key (0600)")
	fs.StringVar(&o.InputFile, "input", "/run/yonder-net/plan.yaml", "the node's view of the route plan, re-read when it changes")
	fs.StringVar(&o.PublishFile, "publish", "/run/yonder-net/nodenetwork.yaml", "where this node's NodeNetwork spec is written")
	fs.StringVar(&o.Devices.WireGuard, "wireguard-device", "yonder-wg", "WireGuard device name (unique on the machine: userspace devices share /var/run/wireguard)")
	fs.StringVar(&o.Devices.VXLAN, "vxlan-device", "yonder-vx", "VXLAN device over the underlay")
	fs.StringVar(&o.Devices.VXLANWG, "vxlan-wg-device", "yonder-vw", "VXLAN device inside WireGuard")
	fs.StringVar(&o.Devices.PodBridge, "pod-bridge", "cni0", "the pods' bridge (the eBPF program attaches to it)")
	fs.StringVar(&o.UnderlayDev, "underlay-device", "", "the underlay interface (default: the one holding the node's address, env NODE_IP, else the default route's)")
	fs.StringVar(&o.Endpoint, "endpoint", "", "address peers dial (default: the underlay device's first IPv4 address)")
	fs.StringVar(&o.ExternalEndpoint, "external-endpoint", "", "address other Sites dial (public or NATed; default: --endpoint)")
	fs.IntVar(&o.WGPort, "wireguard-port", desired.DefaultWireGuardPort, "WireGuard listen port")
	fs.IntVar(&o.ProbePort, "probe-port", desired.DefaultProbePort, "health probe UDP port")
	fs.BoolVar(&o.WireGuardL3, "wireguard-l3", false, "carry pod traffic directly over WireGuard (no VXLAN inside) on links where both Sites have one active gateway; set on every node alike")
	fs.BoolVar(&o.Kernel, "kernel-wireguard", true, "use the kernel's WireGuard when available (else embedded wireguard-go)")
	fs.StringVar(&attach, "ebpf-attach", "", "force tcx or clsact (default: tcx when the kernel has it)")
	fs.StringVar(&o.DebugAddr, "debug-addr", "127.0.0.1:9870", "metrics (/metrics) and state dump (/debug)")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", "", "write a CNI conflist (bridge + host-local) for the node's pod CIDRs here")
	fs.BoolVar(&cleanup, "cleanup-on-exit", false, "remove devices on exit (default: keep them so a restart keeps flows)")
	fs.BoolVar(&useAPI, "api", os.Getenv("KUBERNETES_SERVICE_HOST") != "", "publish the NodeNetwork and read the route plan from the API (else --input is written by someone else)")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --api (default: in-cluster)")
	fs.StringVar(&metricsAddr, "metrics-bind-address", defaultMetricsAddr, "where Prometheus scrapes /metrics over HTTPS, callers authenticated and authorized by the API server (needs --api; 0 disables it; --debug-addr serves the same metrics without authentication on loopback)")
	fs.DurationVar(&o.ResyncInterval, "resync-interval", daemon.DefaultResyncInterval, "apply the whole dataplane again this often, repairing what was changed behind the daemon's back (a failed apply is retried sooner, with backoff)")
	fs.DurationVar(&resync, "api-resync", 10*time.Minute, "safety resync with the API (changes arrive through watches)")
	if len(args) > 0 && args[0] == "debug" {
		return debug(args[1:])
	}
	if len(args) > 0 && args[0] == "rotate" {
		return rotate(args[1:])
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Attach = bpf.Attachment(attach)
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	// The metrics server and the API cache log through controller-runtime's logger.
	ctrllog.SetLogger(logr.FromSlogHandler(o.Log.Handler()))
	if o.Node == "" {
		return fmt.Errorf("failed to start: --node (or NODE_NAME) is required")
	}
	underlay, err := daemon.ResolveUnderlay(o.UnderlayDev, os.Getenv("NODE_IP"))
	if err != nil {
		return err
	}
	o.UnderlayDev = underlay
	d, err := daemon.New(o)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if !useAPI && kubeconfig == "" && metricsAddr != "0" && fs.Changed("metrics-bind-address") {
		return fmt.Errorf("failed to start: --metrics-bind-address needs --api or --kubeconfig (the API server authenticates scrapers)")
	}
	if useAPI || kubeconfig != "" {
		cfg, err := apiConfig(kubeconfig)
		if err != nil {
			return err
		}
		c, ca, err := apiClient(cfg, o.Node)
		if err != nil {
			return err
		}
		if metricsAddr != "0" {
			go func() {
				if err := metricsauth.Serve(ctx, metricsAddr, cfg, d.Collector()); err != nil {
					o.Log.Error("Serving metrics", "err", err)
				}
			}()
		}
		go func() {
			if err := ca.Start(ctx); err != nil {
				o.Log.Error("Watching the API", "err", err)
			}
		}()
		s := &apisync.Syncer{Client: c, Cache: ca, Node: o.Node, InputFile: o.InputFile, Spec: d.Publication, Interval: resync, Log: o.Log,
			State: func() apisync.DaemonState {
				ok, msg := d.Applied()
				return apisync.DaemonState{Applied: ok, Message: msg, Gateway: ok, Dataplane: d.Dataplane()}
			}}
		go func() { _ = s.Run(ctx) }()
	}
	err = d.Run(ctx)
	if cerr := d.Close(cleanup); cerr != nil {
		o.Log.Error("Closing dataplane", "err", cerr)
	}
	return err
}

// defaultMetricsAddr is the metrics port the DaemonSet declares (containerPort "metrics").
const defaultMetricsAddr = ":9871"

// apiConfig loads the API configuration: kubeconfig when given, else in-cluster.
func apiConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := ctrlconfig.GetConfig()
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to load API configuration: %w", err)
	}
	return cfg, nil
}

// apiClient returns a client for writes and the informer cache reads and events come from.
func apiClient(cfg *rest.Config, node string) (client.Client, cache.Cache, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("failed to build scheme: %w", err)
	}
	if err := netv1.AddToScheme(scheme); err != nil {
		return nil, nil, fmt.Errorf("failed to build scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to create API client: %w", err)
	}
	ca, err := apisync.NewCache(cfg, scheme, node)
	if err != nil {
		return nil, nil, err
	}
	return c, ca, nil
}

func rotate(args []string) error {
	fs := pflag.NewFlagSet("rotate", pflag.ContinueOnError)
	addr := fs.String("debug-addr", "127.0.0.1:9870", "the daemon's debug address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+*addr+"/rotate", "text/plain", nil)
	if err != nil {
		return fmt.Errorf("failed to reach yonder-net-node at %s: %w", *addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed to start a key rotation: %s: %s", resp.Status, b)
	}
	_, err = os.Stdout.Write(b)
	return err
}

func debug(args []string) error {
	fs := pflag.NewFlagSet("debug", pflag.ContinueOnError)
	addr := fs.String("debug-addr", "127.0.0.1:9870", "the daemon's debug address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + *addr + "/debug")
	if err != nil {
		return fmt.Errorf("failed to reach yonder-net-node at %s: %w", *addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, err = io.Copy(os.Stdout, resp.Body)
	return err
}
