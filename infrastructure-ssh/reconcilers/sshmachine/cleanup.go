package sshmachine

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/remote"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// Withdraw implements claim.Adapter: the host is cleaned over SSH (a bounded number of attempts, then the
// operator decides) unless nothing ever ran on it, or an operator releases it without cleanup.
func (a *Adapter) Withdraw(ctx context.Context, s *scope) (claim.Withdrawal[*infrav1.YonderSSHHost], ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	m := s.Machine
	switch {
	case m.Annotations[infrav1.SkipCleanupAnnotation] == "true":
		log.Info("Releasing host without cleanup, as the operator asked")
		setCond(m, infrav1.YonderSSHMachineHostCleanedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineCleanupSkippedReason, "Released without cleanup by "+infrav1.SkipCleanupAnnotation)
		return claim.Withdrawal[*infrav1.YonderSSHHost]{Done: true, OnRelease: func(h *infrav1.YonderSSHHost) {
			if h.Annotations == nil {
				h.Annotations = map[string]string{}
			}
			h.Annotations[infrav1.NeedsCleanupAnnotation] = m.Name
		}}, ctrl.Result{}, nil
	case m.Status.Bootstrap == nil:
		// Nothing ever ran on the host (the start is recorded before it happens).
		log.V(4).Info("Releasing host that never ran a bootstrap")
		return claim.Withdrawal[*infrav1.YonderSSHHost]{Done: true}, ctrl.Result{}, nil
	case conditions.IsTrue(m, infrav1.YonderSSHMachineHostCleanedCondition):
		// Cleaned already; only the release failed last time.
	default:
		if res, done := a.cleanup(ctx, s); !done {
			return claim.Withdrawal[*infrav1.YonderSSHHost]{}, res, nil
		}
	}
	return claim.Withdrawal[*infrav1.YonderSSHHost]{Done: true, NodeStopped: true}, ctrl.Result{}, nil
}

// cleanup runs the host's cleanup once; done reports success.
func (a *Adapter) cleanup(ctx context.Context, s *scope) (ctrl.Result, bool) {
	m, host := s.Machine, s.Host
	if m.Annotations[infrav1.RetryCleanupAnnotation] != "" {
		delete(m.Annotations, infrav1.RetryCleanupAnnotation)
		m.Status.CleanupAttempts = 0
	}
	if m.Status.CleanupAttempts >= a.CleanupRetries {
		// Retries are exhausted: the condition says what to do; the annotation wakes us up.
		return ctrl.Result{}, false
	}
	sctx, cancel := context.WithTimeout(ctx, SSHTimeout)
	defer cancel()
	e, _, msg := a.connect(sctx, m, host, infrav1.YonderSSHMachineHostCleanedCondition)
	if e != nil {
		ctrl.LoggerFrom(ctx).Info("Cleaning host", "keepAgentCache", host.Spec.Cleanup.KeepAgentCache)
		err := remote.Cleanup(sctx, e, runID(m), host.Spec.Cleanup)
		_ = e.Close()
		if err == nil {
			setCond(m, infrav1.YonderSSHMachineHostCleanedCondition, metav1.ConditionTrue, infrav1.YonderSSHMachineCleanedReason, "")
			return ctrl.Result{}, true
		}
		msg = err.Error()
	}
	return a.cleanupFailed(ctx, s, msg), false
}

// cleanupFailed counts a failed cleanup attempt and says what to do once retries are exhausted.
func (a *Adapter) cleanupFailed(ctx context.Context, s *scope, msg string) ctrl.Result {
	m := s.Machine
	m.Status.CleanupAttempts++
	full := fmt.Sprintf("Cleanup of YonderSSHHost %s failed (attempt %d of %d): %s", s.Host.Name, m.Status.CleanupAttempts, a.CleanupRetries, msg)
	exhausted := m.Status.CleanupAttempts >= a.CleanupRetries
	if exhausted {
		full += fmt.Sprintf(". Retries exhausted: fix the host and set annotation %s=true on this YonderSSHMachine to try again, or set %s=true to release the host WITHOUT cleanup (the host is then marked %s and stays out of the pool until you remove that annotation)", infrav1.RetryCleanupAnnotation, infrav1.SkipCleanupAnnotation, infrav1.NeedsCleanupAnnotation)
	}
	setCond(m, infrav1.YonderSSHMachineHostCleanedCondition, metav1.ConditionFalse, infrav1.YonderSSHMachineCleanupFailedReason, full)
	ctrl.LoggerFrom(ctx).Info("Cleanup failed", "attempt", m.Status.CleanupAttempts)
	if exhausted {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: a.backoff(m.Status.CleanupAttempts)}
}

func (a *Adapter) backoff(attempt int32) time.Duration {
	d := a.RetryInterval
	for i := int32(1); i < attempt && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// ReleaseOrphan implements claim.Adapter: a host whose machine vanished without its cleanup (its finalizer
// did not hold, or was removed by hand) may still run what that machine started, so it is released as
// SkipCleanupAnnotation releases one, marked NeedsCleanupAnnotation (naming the machine) and out of the
// pool until an operator removes the mark.
func (a *Adapter) ReleaseOrphan(h *infrav1.YonderSSHHost, machine string) {
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[infrav1.NeedsCleanupAnnotation] = machine
}
