package metalmachine

import (
	"context"
	"fmt"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/claim"
)

type withdrawal = claim.Withdrawal[*metal3v1.BareMetalHost]

// Withdraw implements claim.Adapter: the image, user data and custom deploy are withdrawn and the host
// asked to power off; the host controller deprovisions (cleans) it, and it is released once it is
// available again. A paused host or one in error keeps the claim until it recovers.
func (a *Adapter) Withdraw(ctx context.Context, s *scope) (claim.Withdrawal[*metal3v1.BareMetalHost], ctrl.Result, error) {
	m, host := s.Machine, s.Host
	a.provisioned.forget(host.UID)
	if hostpool.Withdraw(host.DeepCopy()) {
		ctrl.LoggerFrom(ctx).Info("Deprovisioning host")
		var err error
		if host, err = a.updateHost(ctx, m, host, hostpool.Withdraw); err != nil {
			return withdrawal{}, ctrl.Result{}, err
		}
		s.Host = host
	}
	m.Status.HostState = string(host.Status.Provisioning.State)
	if _, ok := host.Annotations[metal3v1.PausedAnnotation]; ok {
		setCond(m, infrav1.YonderMetalMachineHostReleasedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineHostPausedReason,
			fmt.Sprintf("BareMetalHost %s carries %s; remove it so the host can be deprovisioned and released", host.Name, metal3v1.PausedAnnotation))
		return withdrawal{}, ctrl.Result{}, nil
	}
	if !Released(host) {
		if host.Status.ErrorType != "" {
			setCond(m, infrav1.YonderMetalMachineHostReleasedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineHostErrorReason,
				fmt.Sprintf("BareMetalHost %s failed to deprovision (%s: %s); fix the host, it is released once it is available again", host.Name, host.Status.ErrorType, host.Status.ErrorMessage))
			return withdrawal{}, ctrl.Result{}, nil
		}
		setCond(m, infrav1.YonderMetalMachineHostReleasedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineDeprovisioningReason,
			fmt.Sprintf("Waiting for BareMetalHost %s to be deprovisioned (cleaning: %s); it is %q", host.Name, cleaningMode(host), host.Status.Provisioning.State))
		return withdrawal{}, ctrl.Result{}, nil
	}
	// The host is deprovisioned (powered off) by now: no kubelet registers its Node again.
	setCond(m, infrav1.YonderMetalMachineHostReleasedCondition, metav1.ConditionTrue, infrav1.YonderMetalMachineReleasedReason, "")
	return withdrawal{Done: true, NodeStopped: true}, ctrl.Result{}, nil
}

func cleaningMode(h *metal3v1.BareMetalHost) string {
	if h.Spec.AutomatedCleaningMode == "" {
		return string(metal3v1.CleaningModeMetadata)
	}
	return string(h.Spec.AutomatedCleaningMode)
}

// ReleaseOrphan implements claim.Adapter: nothing beyond the release itself, which withdraws the image
// and user data and powers the host off (hostpool.Pool.ClearConsumer); the host controller then
// deprovisions it, cleaning it as its automatedCleaningMode says, and it is claimable only once
// available again.
func (a *Adapter) ReleaseOrphan(h *metal3v1.BareMetalHost, _ string) { a.provisioned.forget(h.UID) }
