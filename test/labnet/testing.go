package labnet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// NewForTest creates a network for one test and removes it when the test ends. It fails the test (it
// never skips) when the machine cannot run lab networks, saying what to do.
func NewForTest(t testing.TB) *Network {
	t.Helper()
	n, err := New(context.Background())
	if err != nil {
		t.Fatalf("cannot create a lab network: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("failed to remove lab network %s: %v", n.Bridge, err)
		}
	})
	return n
}

// Exists reports whether a named network namespace exists.
func Exists(ns string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, ns))
	return err == nil
}

// LinkExists reports whether a network device exists in the root namespace.
func LinkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}
