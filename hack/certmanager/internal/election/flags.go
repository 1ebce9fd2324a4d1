// Package election holds the leader election flags that cert-manager's controller and cainjector share
// upstream, with upstream's names and defaults, so that both mains take what the chart's Deployments pass.
package election

import (
	"flag"
	"time"
)

// Flags are the values of the leader election flags.
type Flags struct {
	Enabled                                   *bool
	Namespace                                 *string
	LeaseDuration, RenewDeadline, RetryPeriod *time.Duration
}

// Register adds the flags to fs with upstream's defaults: on, in kube-system, 60 s / 40 s / 15 s.
func Register(fs *flag.FlagSet) Flags {
	return Flags{
		Enabled:       fs.Bool("leader-elect", true, "work only while this process holds the leader Lease"),
		Namespace:     fs.String("leader-election-namespace", "kube-system", "namespace of the leader Lease"),
		LeaseDuration: fs.Duration("leader-election-lease-duration", 60*time.Second, "how long a leader's Lease is valid without renewal"),
		RenewDeadline: fs.Duration("leader-election-renew-deadline", 40*time.Second, "how long the leader retries renewing before it gives up leading"),
		RetryPeriod:   fs.Duration("leader-election-retry-period", 15*time.Second, "how often candidates try to acquire or renew the Lease"),
	}
}
