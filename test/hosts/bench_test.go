package hosts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// BenchmarkHostStartup measures what one test host costs: a bare attached namespace (the baseline: netns +
// veth + address, no sshd) against a full host (the same plus sshd with fresh keys, until key auth works),
// measured side by side in the same run.
func BenchmarkHostStartup(b *testing.B) {
	ctx := context.Background()
	n, err := labnet.New(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Close() })
	var bare, full time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := n.Attach(ctx, fmt.Sprintf("bare-%d", i)); err != nil {
			b.Fatal(err)
		}
		bare += time.Since(start)
		start = time.Now()
		if _, err := hosts.Start(ctx, n, fmt.Sprintf("full-%d", i), 1, hosts.Options{}); err != nil {
			b.Fatal(err)
		}
		full += time.Since(start)
	}
	b.ReportMetric(float64(bare.Milliseconds())/float64(b.N), "baseline-ms/netns")
	b.ReportMetric(float64(full.Milliseconds())/float64(b.N), "ms/host")
	b.ReportMetric(float64(full)/float64(bare), "x-baseline")
}
