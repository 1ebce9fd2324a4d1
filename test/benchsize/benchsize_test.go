package benchsize_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/benchsize"
)

func TestPick(t *testing.T) {
	for v, tiny := range map[string]bool{"": false, "0": false, "false": false, "1": true, "true": true} {
		t.Setenv(benchsize.Env, v)
		g := NewWithT(t)
		g.Expect(benchsize.Tiny()).To(Equal(tiny), v)
		want := 50
		if tiny {
			want = 2
		}
		g.Expect(benchsize.Pick(50, 2)).To(Equal(want), v)
	}
}
