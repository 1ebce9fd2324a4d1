package cachedir

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// A second build of the same entry waits for the first (the lock is per open file, so two callers in one
// process exclude each other as two processes do), and gives up when its context ends.
func TestBuildLockWaitsForTheHolder(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "key.lock")
	unlock, err := Lock(context.Background(), path)
	g.Expect(err).NotTo(HaveOccurred())

	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Lock(short, path)
	g.Expect(err).To(MatchError(ContainSubstring("waiting for another build holding")))

	got := make(chan error, 1)
	go func() {
		second, err := Lock(context.Background(), path)
		if err == nil {
			second()
		}
		got <- err
	}()
	g.Consistently(got, time.Second).ShouldNot(Receive())
	unlock()
	g.Eventually(got, 10*time.Second).Should(Receive(BeNil()))
}
