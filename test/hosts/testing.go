package hosts

import (
	"context"
	"testing"

	"github.com/yonder-dev/yonder/test/labnet"
)

// StartForTest starts count hosts on n for one test; they go away with n.
func StartForTest(t testing.TB, n *labnet.Network, prefix string, count int) []*Host {
	t.Helper()
	hs, err := Start(context.Background(), n, prefix, count, Options{})
	if err != nil {
		t.Fatalf("cannot start hosts: %v", err)
	}
	return hs
}
