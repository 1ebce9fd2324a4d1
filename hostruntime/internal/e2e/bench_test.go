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

	"github.com/yonder-dev/yonder/hostruntime/internal/nspawn"
	"github.com/yonder-dev/yonder/hostruntime/internal/rootfs"
	"github.com/yonder-dev/yonder/hostruntime/internal/state"
)

// BenchmarkBootstrapToNodeReady measures `yonder-agent bootstrap` from start to Node Ready on a warm host
// (artifact cache kept by `reset --keep-cache`, rootfs archive cached), with its phase breakdown, against a
// baseline measured in the same run: the same rootfs archive extracted and booted as a bare nspawn
// machine until its systemd reports the boot finished. x-baseline is how many bare machine boots one
// whole node join costs.
func BenchmarkBootstrapToNodeReady(b *testing.B) {
	ctx := context.Background()
	c := startCluster(b)
	nd := c.newNode(b, "bench")
	// Warm the caches once, outside the measurement.
	if _, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=3m"); err != nil {
		b.Fatalf("warm-up bootstrap: %v: %s", err, stderr)
	}
	reset := func() {
		if _, stderr, err := nd.agent(ctx, "reset", "--keep-cache"); err != nil {
			b.Fatalf("reset: %v: %s", err, stderr)
		}
		_ = c.admin.CoreV1().Nodes().Delete(ctx, nd.name, metav1.DeleteOptions{})
		nd.writeConfig(b) // reset removed it (it holds the spent token); the next bootstrap data writes it again
	}
	reset()
	_, root := nodeBundle(b)

	var agentTotal, baseTotal time.Duration
	phases := map[string]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		base := bareMachineBoot(b, root.Path, fmt.Sprintf("yonder-bench-base-%d", c.net.Slot), nd.host.Dir)
		baseTotal += base
		b.StartTimer()
		start := time.Now()
		if _, stderr, err := nd.agent(ctx, "bootstrap", "--ready-timeout=3m"); err != nil {
			b.Fatalf("bootstrap: %v: %s", err, stderr)
		}
		agentTotal += time.Since(start)
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
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(agentTotal.Seconds()/n, "s-to-ready")
	b.ReportMetric(baseTotal.Seconds()/n, "s-baseline")
	b.ReportMetric(agentTotal.Seconds()/baseTotal.Seconds(), "x-baseline")
	var parts []string
	for _, name := range []string{"preflight", "artifacts", "host", "rootfs", "configure", "machine", "join", "sentinel"} {
		b.ReportMetric(phases[name]/n, "s-"+name)
		parts = append(parts, fmt.Sprintf("%s %.2fs", name, phases[name]/n))
	}
	b.Logf("bootstrap → Node Ready %.2fs (bare nspawn boot %.2fs, %.1fx): %s", agentTotal.Seconds()/n, baseTotal.Seconds()/n,
		agentTotal.Seconds()/baseTotal.Seconds(), strings.Join(parts, ", "))
}

// bareMachineBoot extracts the rootfs archive and boots it as a bare nspawn machine (same flags, own
// cgroup subtree) until systemd inside reports the boot finished; it returns that time and removes it all.
func bareMachineBoot(b *testing.B, archive, name, dir string) time.Duration {
	b.Helper()
	ctx := context.Background()
	root := filepath.Join(dir, name)
	cfg := nspawn.Config{Name: name, Rootfs: root, LogFile: filepath.Join(dir, name+".log")}
	cg := nspawn.Cgroups{Name: name}
	defer func() {
		_ = cfg.Stop(ctx, "", 5*time.Second)
		_ = cg.KillAndRemove(10 * time.Second)
		_ = os.RemoveAll(root)
		_ = os.Remove(cfg.LogFile)
	}()
	start := time.Now()
	if err := rootfs.Extract(ctx, archive, root); err != nil {
		b.Fatal(err)
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
