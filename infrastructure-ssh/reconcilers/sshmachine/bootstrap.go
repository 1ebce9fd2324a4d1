package sshmachine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/cloudinit"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// scope is one reconcile of one machine.
type scope = claim.Scope[*infrav1.YonderSSHMachine, *infrav1.YonderSSHHost]

// Provision implements claim.Adapter: the Machine's bootstrap data runs on the claimed host over SSH,
// as a run the host records, until it wrote the sentinel; then the machine is provisioned.
func (a *Adapter) Provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.Machine
	if a.Facts(m).Provisioned && m.Spec.ProviderID != "" {
		return ctrl.Result{}, nil
	}
	if b := m.Status.Bootstrap; b != nil && b.Phase == infrav1.BootstrapPhaseFailed {
		// Terminal: the run is not repeated blindly; remediation replaces the Machine.
		return ctrl.Result{}, nil
	}
	if b := m.Status.Bootstrap; b != nil && (b.Phase == infrav1.BootstrapPhaseStarting || b.Phase == infrav1.BootstrapPhaseRunning) {
		// Woken before the run's next check (by this controller's own writes, the host's): no SSH round
		// until it is due.
		if wait := a.polls.wait(m.UID); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	// No SSH step may hold a worker for long: a hung remote command is cut off and retried.
	sctx, cancel := context.WithTimeout(ctx, SSHTimeout)
	defer cancel()
	e, reason, _ := a.connect(sctx, m, s.Host, infrav1.YonderSSHMachineBootstrapExecutedCondition)
	if e == nil {
		ctrl.LoggerFrom(ctx).Info("Cannot reach host, retrying", "reason", reason)
		return ctrl.Result{RequeueAfter: a.RetryInterval}, nil
	}
	defer func() { _ = e.Close() }()
	st, err := remote.State(sctx, e, runID(m))
	if err != nil {
		setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineSSHUnreachableReason, err.Error())
		return ctrl.Result{RequeueAfter: a.RetryInterval}, nil
	}
	if !st.Started {
		return a.startBootstrap(sctx, s, e)
	}
	if m.Status.Bootstrap == nil {
		// Status was lost (restart mid-write, or moved): the host's record is authoritative.
		m.Status.Bootstrap = &infrav1.BootstrapStatus{RunID: runID(m), StartedTime: ptr.To(metav1.Now())}
	}
	// The host has the run: it was accepted, whatever the last controller managed to record.
	m.Status.Bootstrap.Phase = infrav1.BootstrapPhaseRunning
	if !st.Finished {
		return a.bootstrapRunning(sctx, s, e)
	}
	return a.bootstrapFinished(sctx, s, e, st)
}

// bootstrapRunning reports a run that has not finished, and fails it once it ran past its timeout.
func (a *Adapter) bootstrapRunning(ctx context.Context, s *scope, e sshexec.Executor) (ctrl.Result, error) {
	m := s.Machine
	timeout := a.DefaultBootstrapTimeout
	if m.Spec.BootstrapTimeout != nil {
		timeout = m.Spec.BootstrapTimeout.Duration
	}
	if b := m.Status.Bootstrap; b.StartedTime != nil && time.Since(b.StartedTime.Time) > timeout {
		return a.bootstrapFailed(ctx, s, e, fmt.Sprintf("did not finish within %s", timeout))
	}
	setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineBootstrapRunningReason,
		fmt.Sprintf("Bootstrap is running on YonderSSHHost %s (log: %s/%s/log)", s.Host.Name, remote.RunsDir, runID(m)))
	elapsed := time.Duration(0)
	if b := m.Status.Bootstrap; b.StartedTime != nil {
		elapsed = time.Since(b.StartedTime.Time)
	}
	return ctrl.Result{RequeueAfter: a.polls.next(m.UID, PollDelay(a.PollInterval, elapsed))}, nil
}

// bootstrapFinished records a finished run: provisioned when it exited 0 and wrote the sentinel.
func (a *Adapter) bootstrapFinished(ctx context.Context, s *scope, e sshexec.Executor, st remote.RunState) (ctrl.Result, error) {
	m := s.Machine
	b := m.Status.Bootstrap
	b.ExitCode = ptr.To(int32(st.ExitCode)) //nolint:gosec // exit codes are 0-255
	if st.ExitCode != 0 || !st.Sentinel {
		msg := fmt.Sprintf("exited with status %d", st.ExitCode)
		if !st.Sentinel {
			msg += " without writing " + remote.SentinelPath
		}
		return a.bootstrapFailed(ctx, s, e, msg)
	}
	if err := remote.Finish(ctx, e, runID(m)); err != nil {
		ctrl.LoggerFrom(ctx).Info("Failed to remove the bootstrap script from the host", "err", err.Error())
	}
	a.polls.forget(m.UID)
	b.Phase = infrav1.BootstrapPhaseSucceeded
	b.FinishedTime = ptr.To(metav1.Now())
	m.Spec.ProviderID = providerID(m, s.Host)
	m.Status.Initialization.Provisioned = ptr.To(true)
	setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionTrue, infrav1.YonderSSHMachineBootstrapSucceededReason, "")
	ctrl.LoggerFrom(ctx).Info("Provisioned host", "providerID", m.Spec.ProviderID)
	return ctrl.Result{}, nil
}

func (a *Adapter) bootstrapFailed(ctx context.Context, s *scope, e sshexec.Executor, why string) (ctrl.Result, error) {
	m := s.Machine
	b := m.Status.Bootstrap
	a.polls.forget(m.UID)
	b.Phase = infrav1.BootstrapPhaseFailed
	b.FinishedTime = ptr.To(metav1.Now())
	if t, err := remote.LogTail(ctx, e, b.RunID, 2048); err == nil {
		b.OutputTail = t
	}
	setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineBootstrapFailedReason,
		fmt.Sprintf("Bootstrap on YonderSSHHost %s %s; see status.bootstrap.outputTail and %s/%s/log on the host; delete the Machine (or let a MachineHealthCheck remediate it) to release and clean the host",
			s.Host.Name, why, remote.RunsDir, b.RunID))
	ctrl.LoggerFrom(ctx).Info("Bootstrap failed", "reason", why)
	return ctrl.Result{}, nil
}

// startBootstrap starts the run, after recording the start on the machine.
func (a *Adapter) startBootstrap(ctx context.Context, s *scope, e sshexec.Executor) (ctrl.Result, error) {
	m := s.Machine
	if b := m.Status.Bootstrap; b != nil && b.Phase != "" && b.Phase != infrav1.BootstrapPhaseStarting {
		// The host accepted the run once, yet has no record of it: it was cleaned or reinstalled under us.
		return a.bootstrapFailed(ctx, s, e, "run record disappeared from the host")
	}
	script, ok, err := a.bootstrapScript(ctx, s, e)
	if err != nil || !ok {
		return ctrl.Result{}, err
	}
	if m.Status.Bootstrap == nil {
		m.Status.Bootstrap = &infrav1.BootstrapStatus{RunID: runID(m), Phase: infrav1.BootstrapPhaseStarting, StartedTime: ptr.To(metav1.Now())}
	}
	setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineBootstrapRunningReason,
		fmt.Sprintf("Bootstrap is running on YonderSSHHost %s (log: %s/%s/log)", s.Host.Name, remote.RunsDir, runID(m)))
	// Record the start BEFORE starting: a machine without status.bootstrap has never run anything on
	// its host, which lets deletion release such a host without SSH.
	if err := s.Patch(ctx); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Starting bootstrap on host")
	if _, err := remote.Start(ctx, e, runID(m), script); err != nil {
		reason, msg := hostconn.Reason(err, s.Host)
		setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, reason, msg)
		return ctrl.Result{RequeueAfter: a.RetryInterval}, nil
	}
	// The phase stays Starting: the first check (a tenth of the poll interval from now) finds the run on
	// the host and records Running, or, for a short bootstrap, its result. Writing Running now would be
	// a status write (and a wake-up of the host and of this machine) that the check replaces a moment later.
	return ctrl.Result{RequeueAfter: a.polls.next(m.UID, PollDelay(a.PollInterval, 0))}, nil
}

// bootstrapScript renders the Machine's bootstrap data into the run's script; ok is false (with the
// condition saying why) when the data cannot be executed over SSH.
func (a *Adapter) bootstrapScript(ctx context.Context, s *scope, e sshexec.Executor) (script string, ok bool, _ error) {
	m := s.Machine
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: m.Namespace, Name: s.DataSecretName()}
	if err := a.getDataSecret(ctx, key, secret); err != nil {
		return "", false, fmt.Errorf("failed to get bootstrap data Secret %s: %w", klog.KRef(key.Namespace, key.Name), err)
	}
	if f, ok := secret.Data["format"]; ok && string(f) != "cloud-config" {
		setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineBootstrapDataUnsupportedReason,
			fmt.Sprintf("Bootstrap data Secret %s has format %q; only cloud-config is executed over SSH", key.Name, string(f)))
		return "", false, nil
	}
	hostname := s.Host.Name
	if out, _, err := e.Run(ctx, "hostname", nil); err == nil && len(out) > 0 {
		hostname = strings.TrimRight(string(out), "\r\n")
	}
	cfg, err := cloudinit.Parse(secret.Data["value"], cloudinit.Options{Hostname: hostname})
	if err != nil {
		var u *cloudinit.UnsupportedError
		reason, hint := infrav1.YonderSSHMachineBootstrapFailedReason, "Fix the bootstrap config that produced it"
		if errors.As(err, &u) {
			// The error names every refused key, so one edit of the bootstrap config can remove them all.
			reason, hint = infrav1.YonderSSHMachineBootstrapDataUnsupportedReason,
				"Remove these from the bootstrap config (docs/infrastructure-ssh.md lists the cloud-init the SSH provider runs)"
		}
		setCond(m, infrav1.YonderSSHMachineBootstrapExecutedCondition, metav1.ConditionFalse, reason,
			fmt.Sprintf("Bootstrap data Secret %s cannot be executed: %v. %s", key.Name, err, hint))
		return "", false, nil
	}
	return remote.ProviderIDPrelude(providerID(m, s.Host)) + cfg.Script(), true, nil
}

// getDataSecret reads the bootstrap data Secret at key from SecretCache, which holds the Secrets that
// carry a cluster name (bootstrap providers label their data Secrets so, as CABPK and ours do), and
// from the API server when the cache does not have it (an unlabelled Secret, or one created a moment
// ago).
func (a *Adapter) getDataSecret(ctx context.Context, key client.ObjectKey, secret *corev1.Secret) error {
	if a.SecretCache != nil {
		err := a.SecretCache.Get(ctx, key, secret)
		if err == nil || !apierrors.IsNotFound(err) {
			return err //nolint:wrapcheck // wrapped by the caller
		}
	}
	return a.Client.Get(ctx, key, secret) //nolint:wrapcheck // wrapped by the caller
}

// connect opens an SSH session to host; on failure it sets condType with the reason and returns nil.
func (a *Adapter) connect(ctx context.Context, m *infrav1.YonderSSHMachine, host *infrav1.YonderSSHHost, condType string) (sshexec.Executor, string, string) {
	e, err := a.dial(ctx, host)
	if err == nil {
		return e, "", ""
	}
	reason, msg := hostconn.Reason(err, host)
	setCond(m, condType, metav1.ConditionFalse, reason, msg)
	return nil, reason, msg
}

// providerID names the host, so the Node a reused host registers again carries the same providerID.
func providerID(m *infrav1.YonderSSHMachine, host *infrav1.YonderSSHHost) string {
	return ProviderIDPrefix + m.Namespace + "/" + host.Name
}

// addresses are the Machine's addresses: the host's inventory address only. The hostname a probe
// found is what the host says about itself; the bootstrap provider approves kubelet-serving
// certificates for the Machine's addresses, so a host could otherwise have itself certified under any
// name it chose (another node's, a service's).
func addresses(h *infrav1.YonderSSHHost) []clusterv1.MachineAddress {
	t := clusterv1.MachineInternalDNS
	if _, err := netip.ParseAddr(h.Spec.Address); err == nil {
		t = clusterv1.MachineInternalIP
	}
	return []clusterv1.MachineAddress{{Type: t, Address: h.Spec.Address}}
}

func setCond(m *infrav1.YonderSSHMachine, t string, status metav1.ConditionStatus, reason, msg string) {
	claim.SetCondition(m, t, status, reason, msg)
}

// PollDelay is how long after a check a running bootstrap is checked again, elapsed after its start: a
// tenth of interval first (a short bootstrap is seen finished soon), then doubling with the run's age up
// to interval. The schedule follows from status.bootstrap.startedTime alone, so a restarted controller
// keeps it.
func PollDelay(interval, elapsed time.Duration) time.Duration {
	return min(interval, max(interval/10, elapsed))
}
