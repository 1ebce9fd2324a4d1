package netboot_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/tftp"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/tftp/tftpclient"
	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// The boot-service benchmarks against their Debian peers report, in the units every benchmark shares:
// the aggregate throughput of all clients (MiB/s) and the same for the peer (baseline-MiB/s), the ratio
// (x-baseline), and the p50/p99 latency of one client's fetch (ms, baseline-…-ms).

// iPXEFiles are the binaries a PXE boot fetches over TFTP (Debian's ipxe package).
var iPXEFiles = []string{"undionly.kpxe", "snponly.efi", "ipxe.efi"}

// BenchmarkTFTPVersusTFTPDHPA: 50 clients at once (YONDER_BENCH_CLIENTS) each fetch the iPXE binaries
// (undionly.kpxe, snponly.efi, ipxe.efi) asking for blksize 1468, tsize and windowsize 16, from our server
// and from tftpd-hpa (in.tftpd started by the benchmark on loopback, same directory, same clients).
// tftpd-hpa has no RFC 7440 window size and answers lock-step, as it would on a boot network.
func BenchmarkTFTPVersusTFTPDHPA(b *testing.B) {
	clients := benchsize.Pick(envInt("YONDER_BENCH_CLIENTS", 50), 2)
	dir := b.TempDir()
	var size int64
	sizes := map[string]int64{}
	for _, f := range iPXEFiles {
		data, err := os.ReadFile(filepath.Join(tftp.DefaultRoot, f)) // ipxe.efi: a symlink to /boot/ipxe.efi
		if err != nil {
			b.Fatalf("the iPXE binaries are missing (Debian package ipxe, hack/test-bins.sh --packages): %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			b.Fatal(err)
		}
		size += int64(len(data))
		sizes[f] = int64(len(data))
	}
	if _, err := exec.LookPath("atftp"); err != nil {
		b.Fatal("atftp is missing: run hack/test-bins.sh --packages")
	}
	metrics := tftp.NewMetrics(nil)
	ours := serveOurTFTP(b, dir, metrics)
	peer, peerCPU := startTFTPDHPA(b, dir)
	// The clients are atftp processes (Debian's TFTP client with RFC 7440), as a boot network has one client
	// per machine: a Go client inside the benchmark cost ~15 ms of CPU per MiB, ten times the servers, and
	// made the benchmark measure itself.
	out := b.TempDir()
	fetch := func(addr string) func(int) error {
		host, port, _ := net.SplitHostPort(addr)
		return func(i int) error {
			for _, f := range iPXEFiles {
				dst := filepath.Join(out, fmt.Sprintf("%d-%s", i, f))
				cmd := exec.Command("atftp", "--option", "windowsize 16", "--option", "blksize 1468", "--option", "tsize enable",
					"--tftp-timeout", "2", "-g", "-r", f, "-l", dst, host, port)
				if o, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("atftp %s from %s: %w: %s", f, addr, err, o)
				}
				fi, err := os.Stat(dst)
				if err != nil || fi.Size() != sizes[f] {
					return fmt.Errorf("atftp %s from %s: got %v bytes (%v), want %d", f, addr, fi, err, sizes[f])
				}
				_ = os.Remove(dst)
			}
			return nil
		}
	}
	var y, p fetchStats
	b.ResetTimer()
	for range b.N {
		y.add(b, "yonder TFTP", clients, size, nil, fetch(ours))
		p.add(b, "tftpd-hpa", clients, size, peerCPU, fetch(peer))
	}
	b.StopTimer()
	reportVersus(b, &y, &p)
	// Windows sent again (timeouts or partial ACKs): a lost datagram costs a 2 s timeout, which shows in p99.
	b.ReportMetric(testutil.ToFloat64(metrics.Retransmits)/float64(b.N), "retransmits")
	b.ReportMetric(float64(slices.Max(y.lat).Milliseconds()), "max-ms")
	b.ReportMetric(float64(slices.Max(p.lat).Milliseconds()), "baseline-max-ms")
}

// serveOurTFTP serves dir with our TFTP server on loopback (the manager's defaults) until the benchmark ends.
func serveOurTFTP(b *testing.B, dir string, metrics *tftp.Metrics) string {
	b.Helper()
	srv, err := tftp.New(tftp.Config{Root: dir}, logr.Discard(), metrics)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, conn) }()
	b.Cleanup(func() { cancel(); <-done; _ = srv.Close() })
	return conn.LocalAddr().String()
}

// startTFTPDHPA runs Debian's in.tftpd on a free loopback port serving dir (chrooted: --secure) until the
// benchmark ends, and waits until it answers.
func startTFTPDHPA(b *testing.B, dir string) (string, func() time.Duration) {
	b.Helper()
	addr := freeAddr(b, "udp4")
	// --user root: the benchmark's temporary directory is private to root.
	cmd := exec.Command("in.tftpd", "--foreground", "--listen", "--address", addr, "--secure", "--user", "root",
		"--blocksize", "1468", dir)
	cpu := startDaemon(b, "in.tftpd (Debian package tftpd-hpa)", cmd, func() error {
		_, err := tftpclient.Get(context.Background(), addr, iPXEFiles[0], io.Discard, tftpclient.Options{Timeout: 200 * time.Millisecond, Retries: 1})
		return err
	})
	return addr, cpu
}

// BenchmarkHTTPVersusNginx: 50 clients at once (YONDER_BENCH_CLIENTS) each fetch a kernel (8 MiB) and an
// initrd (48 MiB; YONDER_BENCH_INITRD_MIB) from our boot server (as yonder-metal-manager serves
// /artifacts/) and from Debian's nginx (started by the benchmark with a generated configuration in a
// temporary directory: sendfile on, access log off, as many workers as cores), whole or in 1 MiB Range
// requests. Latency is one client's whole fetch (both files), or one Range request.
func BenchmarkHTTPVersusNginx(b *testing.B) {
	clients := benchsize.Pick(envInt("YONDER_BENCH_CLIENTS", 50), 2)
	files := map[string]int{"vmlinuz": benchsize.Pick(8, 1) << 20, "initrd.img": benchsize.Pick(envInt("YONDER_BENCH_INITRD_MIB", 48), 2) << 20}
	dir := b.TempDir()
	var size int64
	for name, n := range files {
		writeRandom(b, filepath.Join(dir, name), n)
		size += int64(n)
	}
	ours := bootHTTPServer(b, dir)
	peer, peerCPU := startNginx(b, dir)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}}
	names := []string{"vmlinuz", "initrd.img"}
	// One fetch of each file from each server first: the measured runs are the steady state. (Cold, our boot
	// server's first requests each hash the whole artifact for its digest headers until one of them has
	// cached it: with 50 clients arriving at once, 50 hashes of each file, 39% of the CPU profile.)
	for _, base := range []string{ours, peer} {
		for _, n := range names {
			if err := httpGet(hc, "http://"+base+"/artifacts/"+n, "", int64(files[n])); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, sc := range []struct {
		name   string
		chunk  int64 // 0: whole files
		perReq bool
	}{{"whole-files", 0, false}, {"ranges-1MiB", 1 << 20, true}} {
		b.Run(sc.name, func(b *testing.B) {
			var y, p fetchStats
			for range b.N {
				for _, s := range []struct {
					st   *fetchStats
					base string
					cpu  func() time.Duration
				}{{&y, "http://" + ours, nil}, {&p, "http://" + peer, peerCPU}} {
					s.st.perRequest = sc.perReq
					s.st.add(b, s.base, clients, size, s.cpu, func(int) error {
						for _, n := range names {
							if err := httpFetch(hc, s.base+"/artifacts/"+n, int64(files[n]), sc.chunk, s.st); err != nil {
								return err
							}
						}
						return nil
					})
				}
			}
			reportVersus(b, &y, &p)
		})
	}
}

// httpFetch gets url (size bytes) whole, or in chunk-sized Range requests each timed into st.
func httpFetch(hc *http.Client, url string, size, chunk int64, st *fetchStats) error {
	if chunk == 0 {
		return httpGet(hc, url, "", size)
	}
	for off := int64(0); off < size; off += chunk {
		end := min(off+chunk, size) - 1
		start := time.Now()
		if err := httpGet(hc, url, fmt.Sprintf("bytes=%d-%d", off, end), end-off+1); err != nil {
			return err
		}
		st.observe(time.Since(start))
	}
	return nil
}

func httpGet(hc *http.Client, url, rng string, want int64) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	wantStatus := http.StatusOK
	if rng != "" {
		req.Header.Set("Range", rng)
		wantStatus = http.StatusPartialContent
	}
	rsp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = rsp.Body.Close() }()
	// Read in 1 MiB reads: io.Copy to io.Discard reads 8 KiB at a time, which made the clients, not the
	// servers, the limit (86% of the CPU profile in read(2)).
	buf := readBufs.Get().(*[]byte)
	defer readBufs.Put(buf)
	n, err := io.CopyBuffer(discard{}, rsp.Body, *buf)
	if err != nil {
		return fmt.Errorf("GET %s %s: %w", url, rng, err)
	}
	if rsp.StatusCode != wantStatus || n != want {
		return fmt.Errorf("GET %s %s: status %d, %d bytes; want %d, %d bytes", url, rng, rsp.StatusCode, n, wantStatus, want)
	}
	return nil
}

var readBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// discard is io.Discard without its ReaderFrom (which would read 8 KiB at a time).
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// startNginx runs Debian's nginx serving dir under /artifacts/ on a free loopback port, with its
// configuration, pid file, logs and temporary paths in a directory of its own (no system file touched).
func startNginx(b *testing.B, dir string) (string, func() time.Duration) {
	b.Helper()
	addr := freeAddr(b, "tcp4")
	prefix := b.TempDir()
	conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes auto;
user root;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	tcp_nopush on;
	keepalive_requests 100000;
	default_type application/octet-stream;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	server {
		listen %[2]s;
		location /artifacts/ { alias %[3]s/; }
	}
}
`, prefix, addr, dir)
	path := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	nginx := exec.Command("nginx", "-p", prefix, "-e", filepath.Join(prefix, "error.log"), "-c", path)
	cpu := startDaemon(b, "nginx (Debian package nginx)", nginx, func() error {
		rsp, err := http.Get("http://" + addr + "/artifacts/vmlinuz")
		if err != nil {
			return err
		}
		_ = rsp.Body.Close()
		if rsp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", rsp.StatusCode)
		}
		return nil
	})
	return addr, cpu
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(b *testing.B, network string) string {
	b.Helper()
	var addr string
	if network == "udp4" {
		c, err := net.ListenPacket(network, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr = c.LocalAddr().String()
		_ = c.Close()
	} else {
		l, err := net.Listen(network, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr = l.Addr().String()
		_ = l.Close()
	}
	return addr
}

// startDaemon starts cmd in its own process group, waits until ready succeeds, moves the group into a
// cpuacct cgroup and returns what reads its CPU time; it stops the group (SIGTERM, then SIGKILL) when the
// benchmark ends.
func startDaemon(b *testing.B, what string, cmd *exec.Cmd, ready func() error) (cpu func() time.Duration) {
	b.Helper()
	group := newCPUGroup(b)
	if _, err := exec.LookPath(cmd.Args[0]); err != nil {
		b.Fatalf("%s is missing: run hack/test-bins.sh --packages", what)
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatalf("failed to start %s: %v", what, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if b.Failed() {
			b.Logf("%s output:\n%s", what, out.String())
		}
	})
	waitReady(b, what, ready)
	group.join(b, cmd.Process.Pid)
	return func() time.Duration { return group.usage(b) }
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return string(s.b) }

// waitReady asks ready on every tick until it succeeds; a daemon that has not answered within 30 s fails
// the benchmark with the last error it gave.
func waitReady(b *testing.B, what string, ready func() error) {
	b.Helper()
	const limit = 30 * time.Second
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for err := ready(); err != nil; {
		select {
		case <-deadline.C:
			b.Fatalf("%s did not answer within %s: %v", what, limit, err)
		case <-tick.C:
			err = ready()
		}
	}
}

func writeRandom(b *testing.B, path string, n int) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := io.CopyN(f, randReader{}, int64(n)); err != nil {
		b.Fatal(err)
	}
}

// randReader is cheap pseudo-random filler: the servers must not be able to compress it.
type randReader struct{}

func (randReader) Read(p []byte) (int, error) {
	x := uint64(time.Now().UnixNano()) | 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	return len(p), nil
}

// fetchStats sums one server's runs: bytes moved, wall time, latencies (per client fetch, or per
// request when perRequest), and CPU time: this process's (clients, plus our server when it is the one
// measured) and the peer's processes'.
type fetchStats struct {
	mu               sync.Mutex
	bytes            int64
	wall             time.Duration
	lat              []time.Duration
	perRequest       bool
	selfCPU, peerCPU time.Duration
}

func (s *fetchStats) observe(d time.Duration) { s.mu.Lock(); s.lat = append(s.lat, d); s.mu.Unlock() }

// add runs fetch for clients concurrent clients (each moving size bytes) and records it; any error fails
// the benchmark.
func (s *fetchStats) add(b *testing.B, what string, clients int, size int64, peerCPU func() time.Duration, fetch func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make([]error, clients)
	if peerCPU == nil {
		peerCPU = func() time.Duration { return 0 }
	}
	self0, peer0 := benchmeter.SelfCPU(), peerCPU()
	defer func() { s.selfCPU += benchmeter.SelfCPU() - self0; s.peerCPU += peerCPU() - peer0 }()
	start := time.Now()
	for i := range clients {
		wg.Go(func() {
			t := time.Now()
			errs[i] = fetch(i)
			if !s.perRequest {
				s.observe(time.Since(t))
			}
		})
	}
	wg.Wait()
	s.wall += time.Since(start)
	s.bytes += int64(clients) * size
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("%s: %v", what, err)
	}
}

func (s *fetchStats) rate() float64 { return float64(s.bytes) / (1 << 20) / s.wall.Seconds() }

func (s *fetchStats) percentile(p int) float64 {
	l := slices.Clone(s.lat)
	slices.Sort(l)
	return float64(l[(len(l)-1)*p/100].Microseconds()) / 1000
}

// cpuacctRoot is the cgroup v1 cpuacct hierarchy; a peer runs in a group of its own there, so that its CPU
// time includes every process it forks (tftpd-hpa forks one per transfer and does not collect their times;
// nginx's workers).
const cpuacctRoot = "/sys/fs/cgroup/cpuacct"

// cpuGroup is a new cpuacct cgroup (removed when the benchmark ends, after the peer stopped: cleanups run
// last-in first-out, so create it before starting the peer).
type cpuGroup string

var cpuGroups atomic.Int32

func newCPUGroup(b *testing.B) cpuGroup {
	b.Helper()
	dir := filepath.Join(cpuacctRoot, fmt.Sprintf("yonder-bench-%d-%d", os.Getpid(), cpuGroups.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatalf("failed to create a cpuacct cgroup for the peer's CPU time: %v", err)
	}
	b.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			b.Logf("failed to remove cgroup %s: %v", dir, err)
		}
	})
	return cpuGroup(dir)
}

// join moves every process of process group pgid into the group (the daemon and the workers it forked);
// what they fork later starts there.
func (g cpuGroup) join(b *testing.B, pgid int) {
	b.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		st, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(string(st), ") ") // after the command name, which may hold spaces
		if f := strings.Fields(rest); !ok || len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		if err := os.WriteFile(filepath.Join(string(g), "cgroup.procs"), []byte(pid), 0o644); err != nil && !os.IsNotExist(err) {
			b.Logf("failed to move process %s into %s: %v", pid, g, err)
		}
	}
}

// usage is the group's CPU time so far.
func (g cpuGroup) usage(b *testing.B) time.Duration {
	b.Helper()
	v, err := os.ReadFile(filepath.Join(string(g), "cpuacct.usage"))
	if err != nil {
		b.Fatalf("failed to read the peer's CPU time: %v", err)
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	return time.Duration(n)
}

// reportVersus reports ours against the peer in the shared units, and the CPU each server spent per MiB:
// the peer's from its cgroup, ours as this process's CPU while it was measured minus this process's CPU
// while the peer was (ours runs in the benchmark's process, beside the clients or their launcher).
func reportVersus(b *testing.B, ours, peer *fetchStats) {
	b.Helper()
	mib := float64(ours.bytes) / (1 << 20)
	b.ReportMetric(float64((ours.selfCPU-peer.selfCPU).Milliseconds())/mib, "cpu-ms/MiB")
	b.ReportMetric(float64(peer.peerCPU.Milliseconds())/(float64(peer.bytes)/(1<<20)), "baseline-cpu-ms/MiB")
	b.ReportMetric(float64(peer.selfCPU.Milliseconds())/(float64(peer.bytes)/(1<<20)), "client-cpu-ms/MiB")
	b.ReportMetric(ours.rate(), "MiB/s")
	b.ReportMetric(peer.rate(), "baseline-MiB/s")
	b.ReportMetric(ours.rate()/peer.rate(), "x-baseline")
	b.ReportMetric(ours.percentile(50), "p50-ms")
	b.ReportMetric(ours.percentile(99), "p99-ms")
	b.ReportMetric(peer.percentile(50), "baseline-p50-ms")
	b.ReportMetric(peer.percentile(99), "baseline-p99-ms")
}
