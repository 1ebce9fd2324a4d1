// Package sshhosts starts the SSH provider's test hosts: test/hosts hosts (real sshd in network
// namespaces) on which the directories a bootstrap writes to are private per host, so that sentinels, run
// records and written files of one host are invisible to the others, as on separate machines.
package sshhosts

import (
	"context"
	"testing"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// PrivateDirs are the directories each host gets its own empty copy of. /root is private too: the
// machine's own root dotfiles must not run in the hosts' sessions. /usr/local/bin is private so a
// yonder-agent installed on this machine (by another suite, or by hand) is never found by the hosts'
// cleanup, which runs `yonder-agent reset` instead of its configured commands when one is there.
var PrivateDirs = []string{"/run", "/var/lib/yonder-ssh", "/etc/kubernetes", "/etc/yonder", "/usr/local/bin", "/usr/local/sbin", hosts.HomeDir}

// Host is a running test host.
type Host = hosts.Host

// NewClientKey returns a fresh client key as OpenSSH PEM and as a signer.
var NewClientKey = hosts.NewClientKey

// Start starts count hosts named <prefix>-<i> on n, all authorizing clientKeyPEM; they stop when n closes.
func Start(ctx context.Context, n *labnet.Network, prefix string, count int, clientKeyPEM []byte) ([]*Host, error) {
	return hosts.Start(ctx, n, prefix, count, hosts.Options{ClientKeyPEM: clientKeyPEM, PrivateDirs: PrivateDirs})
}

// StartForTest starts count hosts named <prefix>-<i> on a lab network of their own, all authorizing one
// fresh client key (returned as OpenSSH PEM); they go away with the test. It fails the test when they
// cannot start.
func StartForTest(t testing.TB, prefix string, count int) ([]*Host, []byte) {
	t.Helper()
	n := labnet.NewForTest(t)
	keyPEM, _, err := NewClientKey()
	if err != nil {
		t.Fatalf("failed to create a client key: %v", err)
	}
	hs, err := Start(context.Background(), n, prefix, count, keyPEM)
	if err != nil {
		t.Fatalf("failed to start test hosts: %v", err)
	}
	return hs, keyPEM
}
