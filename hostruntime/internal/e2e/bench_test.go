package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
	"github.com/yonder-dev/yonder/pkg/nspawn"
	"github.com/yonder-dev/yonder/test/benchmeter"
	"github.com/yonder-dev/yonder/test/benchsize"
)

// BenchmarkBootstrapToNodeReady measures `yonder-agent bootstrap` from start to Node Ready on a warm host
// (artifact cache kept by `reset --keep-cache`, rootfs tree unpacked in the cache), with its phase breakdown, over
// 20 joins (issue 21: 20 samples, p50 and p95), against a baseline measured in the same run: the
// same rootfs tree booted as a bare nspawn machine on an overlay root until its systemd reports the boot
// finished (what the agent's rootfs and machine phases do on a warm host, without the node). x-baseline
// is how many bare machine boots one whole node join costs (p50 over p50). At the tiny size the suite
// runs, one cold join without the warm-up is enough to keep the benchmark working.
func BenchmarkBootstrapToNodeReady(b *testing.B) {
	ctx := context.Background()
	c := startCluster(b)
	nd := c.newNode(b, "bench")
	reset := func() {
		if _, stderr, err := nd.agent(ctx, "reset", "--keep-cache"); err != nil {
			b.Fatalf("reset: %v: %s", err, stderr)
		}
		_ = c.admin.CoreV1().Nodes().Delete(ctx, nd.name, metav1.DeleteOptions{})
		nd.writeConfig(b) // reset removed it (it holds the spent token); the next bootstrap data writes it again
	}
	if !benchsize.Tiny() {
		// Warm the caches once, outside the measurement.
		if _, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=3m"); err != nil {
			b.Fatalf("warm-up bootstrap: %v: %s", err, stderr)
		}
		reset()
	}
	// The baseline boots the tree the agent unpacked into its cache: extracted here once, outside the
	// measurement, as the warm host has it.
	// Where the host cannot mount an overlay the agent unpacks the archive into the machine, and so does
	// the baseline.
	_, root := nodeBundle(b)
	tree := filepath.Join(nd.host.Dir, "bench-tree")
	if err := rootfs.Extract(ctx, root.Path, tree); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(tree) })
	prepare := func(m rootfs.Machine) error { return m.Mount(tree) }
	if err := rootfs.OverlaySupported(nd.host.Dir); err != nil {
		b.Logf("baseline without an overlay root: %v", err)
		prepare = func(m rootfs.Machine) error { return rootfs.Extract(ctx, root.Path, m.Dir) }
	}
	samples := benchsize.Pick(20, 1)

	var joins, boots []float64
	phases := map[string]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range samples {
			b.StopTimer()
			boots = append(boots, bareMachineBoot(b, prepare, fmt.Sprintf("yonder-bench-base-%d", c.net.Slot), nd.host.Dir).Seconds())
			b.StartTimer()
			start := time.Now()
			if _, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=3m"); err != nil {
				b.Fatalf("bootstrap: %v: %s", err, stderr)
			}
			joins = append(joins, time.Since(start).Seconds())
			b.StopTimer()
			st, err := state.Store{Dir: nd.stateDir}.Load()
			if err != nil {
				b.Fatal(err)
			}
			for name, p := range st.Phases {
				phases[name] += p.DurationSeconds
			}
			reset()
			b.StartTimer()
		}
	}
	b.StopTimer()
	n := float64(len(joins))
	// Nearest rank: with 20 samples p95 is the second slowest join, never an interpolation between two.
	p50, p95, base50 := benchmeter.Percentile(joins, 50), benchmeter.Percentile(joins, 95), benchmeter.Percentile(boots, 50)
	b.ReportMetric(p50, "s-to-ready")
	b.ReportMetric(p95, "p95-s-to-ready")
	b.ReportMetric(base50, "s-baseline")
	b.ReportMetric(p50/base50, "x-baseline")
	b.ReportMetric(n, "samples")
	var parts []string
	for _, name := range []string{"preflight", "artifacts", "host", "rootfs", "configure", "machine", "join", "sentinel"} {
		b.ReportMetric(phases[name]/n, "s-"+name)
		parts = append(parts, fmt.Sprintf("%s %.2fs", name, phases[name]/n))
	}
	b.Logf("bootstrap → Node Ready over %d joins: p50 %.2fs, p95 %.2fs (bare nspawn boot p50 %.2fs, %.1fx); mean phases: %s",
		len(joins), p50, p95, base50, p50/base50, strings.Join(parts, ", "))
}

// bareMachineBoot boots the rootfs tree as a bare nspawn machine (same flags, own cgroup subtree, the
// root that prepare gives it: an overlay on the same cached tree, as the agent gives its machine) until
// systemd inside reports the boot finished; it returns that time and removes it all.
func bareMachineBoot(b *testing.B, prepare func(rootfs.Machine) error, name, dir string) time.Duration {
	b.Helper()
	ctx := context.Background()
	m := rootfs.NewMachine(filepath.Join(dir, name))
	cfg := nspawn.Config{Name: name, Rootfs: m.Dir, LogFile: filepath.Join(dir, name+".log")}
	cg := nspawn.Cgroups{Name: name}
	defer func() {
		_ = cfg.Stop(ctx, "", 5*time.Second)
		_ = cg.KillAndRemove(10 * time.Second)
		_ = m.Discard()
		_ = os.Remove(cfg.LogFile)
	}()
	start := time.Now()
	if err := prepare(m); err != nil {
		b.Fatal(err)
	}
	if m.Overlaid() {
		cfg.Binds = []string{m.ContainerdDir() + ":/var/lib/containerd"}
	}
	paths, err := cg.Create()
	if err != nil {
		b.Fatal(err)
	}
	pid, _, err := cfg.Start(ctx, paths)
	if err != nil {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		leader := nspawn.Leader(pid)
		if leader == 0 {
			return false, nil
		}
		out, _ := nspawn.Exec(ctx, leader, "systemctl", "is-system-running")
		s := strings.TrimSpace(string(out))
		return s == "running" || s == "degraded", nil
	})
	if err != nil {
		log, _ := os.ReadFile(cfg.LogFile)
		b.Fatalf("bare machine did not finish booting: %v: %s", err, log)
	}
	return time.Since(start)
}
