package sshmachine_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/infrastructure-ssh/reconcilers/sshmachine"
)

// The first check of a run comes after a tenth of the poll interval, then the wait grows with the run's
// age up to the interval.
func TestPollDelay(t *testing.T) {
	for _, c := range []struct {
		elapsed, want time.Duration
	}{
		{0, time.Second},
		{500 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{2 * time.Second, 2 * time.Second},
		{4 * time.Second, 4 * time.Second},
		{9 * time.Second, 9 * time.Second},
		{16 * time.Second, 10 * time.Second},
		{time.Hour, 10 * time.Second},
	} {
		NewWithT(t).Expect(sshmachine.PollDelay(10*time.Second, c.elapsed)).To(Equal(c.want), "elapsed %s", c.elapsed)
	}
}
