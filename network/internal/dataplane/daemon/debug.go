package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector returns the daemon's Prometheus collector (tunnels, probes, failovers, eBPF maps, kernel
// writes), served on the debug address and, authenticated, on the metrics address.
func (d *Daemon) Collector() prometheus.Collector { return &collector{d: d} }

func (d *Daemon) serveDebug(ctx context.Context) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// POST /rotate starts a key rotation (yonder-net-node rotate). The debug address is loopback by default:
	// only the node itself can ask.
	mux.HandleFunc("/rotate", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		if err := d.Rotate(); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrRotating) {
				code = http.StatusConflict
			}
			http.Error(w, err.Error(), code)
			return
		}
		_, _ = fmt.Fprintln(w, "rotation started")
	})
	mux.HandleFunc("/debug", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.Status())
	})
	ln, err := net.Listen("tcp", d.opt.DebugAddr)
	if err != nil {
		d.opt.Log.Error("Serving debug endpoint", "err", err)
		return
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	_ = srv.Serve(ln)
}

type collector struct{ d *Daemon }

var (
	mHandshake = prometheus.NewDesc("yonder_net_peer_handshake_age_seconds", "Seconds since the last WireGuard handshake with a peer (-1: never).", []string{"peer"}, nil)
	mRx        = prometheus.NewDesc("yonder_net_peer_rx_bytes_total", "Bytes received from a WireGuard peer.", []string{"peer"}, nil)
	mTx        = prometheus.NewDesc("yonder_net_peer_tx_bytes_total", "Bytes sent to a WireGuard peer.", []string{"peer"}, nil)
	mRTT       = prometheus.NewDesc("yonder_net_probe_rtt_seconds", "Last health probe round trip.", []string{"peer"}, nil)
	mLoss      = prometheus.NewDesc("yonder_net_probe_lost_total", "Probes sent without an answer.", []string{"peer"}, nil)
	mUp        = prometheus.NewDesc("yonder_net_probe_up", "1 when the peer answers its probes.", []string{"peer"}, nil)
	mFailovers = prometheus.NewDesc("yonder_net_failovers_total", "Peers taken out of gateway groups by the probes.", nil, nil)
	mMap       = prometheus.NewDesc("yonder_net_ebpf_map_entries", "Entries in the eBPF maps.", []string{"map"}, nil)
	mWrites    = prometheus.NewDesc("yonder_net_kernel_writes_total", "Kernel writes made by diff reconciliation.", []string{"kind"}, nil)
	mFailures  = prometheus.NewDesc("yonder_net_apply_failures_total", "Applies of the plan that failed (each is retried with backoff).", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mHandshake, mRx, mTx, mRTT, mLoss, mUp, mFailovers, mMap, mWrites, mFailures} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.d.Status()
	for _, p := range st.WireGuard.Peers {
		ch <- prometheus.MustNewConstMetric(mHandshake, prometheus.GaugeValue, p.HandshakeAge, p.PublicKey)
		ch <- prometheus.MustNewConstMetric(mRx, prometheus.CounterValue, float64(p.RxBytes), p.PublicKey)
		ch <- prometheus.MustNewConstMetric(mTx, prometheus.CounterValue, float64(p.TxBytes), p.PublicKey)
	}
	for k, s := range st.Probes {
		ch <- prometheus.MustNewConstMetric(mRTT, prometheus.GaugeValue, s.LastRTT.Seconds(), k)
		lost := float64(0)
		if s.Sent > s.Received {
			lost = float64(s.Sent - s.Received)
		}
		ch <- prometheus.MustNewConstMetric(mLoss, prometheus.CounterValue, lost, k)
		up := 0.0
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(mUp, prometheus.GaugeValue, up, k)
	}
	ch <- prometheus.MustNewConstMetric(mFailovers, prometheus.CounterValue, float64(st.Failovers))
	ch <- prometheus.MustNewConstMetric(mFailures, prometheus.CounterValue, float64(st.ApplyFailures))
	ch <- prometheus.MustNewConstMetric(mMap, prometheus.GaugeValue, float64(st.MapPrefixes), "prefixes")
	ch <- prometheus.MustNewConstMetric(mMap, prometheus.GaugeValue, float64(st.MapGroups), "groups")
	for k, v := range map[string]int{"links": st.Writes.Links, "fdb": st.Writes.FDB, "neigh": st.Writes.Neigh, "routes": st.Writes.Routes, "peers": st.Writes.Peers, "maps": st.Writes.Maps} {
		ch <- prometheus.MustNewConstMetric(mWrites, prometheus.CounterValue, float64(v), k)
	}
}
