package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/cert-manager/cert-manager/yonder-test-peers/internal/election"
)

// leaderElection runs the controller under upstream's Lease (lease) as the shared flags configure it.
type leaderElection struct {
	lease string
	election.Flags
}

// leaderElectionFlags registers upstream's leader election flags for the Lease lease.
func leaderElectionFlags(fs *flag.FlagSet, lease string) *leaderElection {
	return &leaderElection{lease: lease, Flags: election.Register(fs)}
}

// errStoppedLeading ends a controller that lost its Lease: like upstream, the process exits and its Pod
// restarts as a candidate, so no two controllers ever reconcile at once.
var errStoppedLeading = errors.New("lost the leader Lease")

// run runs f — at once without leader election, else once this process holds the Lease — and returns when
// ctx ends (nil), f ends, a listener fails (listenErr) or the Lease is lost.
func (l *leaderElection) run(ctx context.Context, kubeconfig string, listenErr <-chan error, f func(context.Context) error) error {
	done := make(chan error, 1)
	if !*l.Enabled {
		go func() { done <- f(ctx) }()
		return wait(ctx, done, listenErr)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("failed to load the apiserver's credentials: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("failed to create the leader election client: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("failed to read the host name for the leader identity: %w", err)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: l.lease, Namespace: *l.Namespace},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())},
		},
		LeaseDuration:   *l.LeaseDuration,
		RenewDeadline:   *l.RenewDeadline,
		RetryPeriod:     *l.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            l.lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				err := f(ctx)
				if err == nil && lctx.Err() == nil {
					// f returns nil when its context ends: here, because the Lease was lost.
					err = errStoppedLeading
				}
				done <- err
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("failed to set up leader election: %w", err)
	}
	go func() {
		le.Run(lctx)
		// Run returns when the Lease is lost or lctx ends; f reports the first, wait sees the second.
		if lctx.Err() == nil && !le.IsLeader() {
			select {
			case done <- errStoppedLeading:
			default:
			}
		}
	}()
	return wait(ctx, done, listenErr)
}

// wait returns nil when ctx ends, else the first of f's result and a listener's failure.
func wait(ctx context.Context, done <-chan error, listenErr <-chan error) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		if ctx.Err() != nil {
			return nil
		}
		return err
	case err := <-listenErr:
		if ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("listener: %w", err)
	}
}

// healthHandler answers the chart's liveness probe (/livez) and /healthz while the process runs.
func healthHandler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	mux.HandleFunc("/livez", ok)
	mux.HandleFunc("/healthz", ok)
	return mux
}
