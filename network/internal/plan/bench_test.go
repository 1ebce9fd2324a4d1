package plan_test

import (
	"testing"

	"github.com/yonder-dev/yonder/network/internal/plan"
	"github.com/yonder-dev/yonder/network/internal/plan/plantest"
)

func BenchmarkProfileCompute(b *testing.B) {
	in := plantest.Synthetic(50000, 200)
	first := plan.Compute(in)
	in.Previous = first.Slices
	for b.Loop() {
		plan.Compute(in)
	}
}
