package metalmachine

import (
	"context"
	"fmt"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostdata"
	"github.com/yonder-dev/yonder/pkg/claim"
	"github.com/yonder-dev/yonder/pkg/cloudconfig"
)

// scope is one reconcile of one machine.
type scope = claim.Scope[*infrav1.YonderMetalMachine, *metal3v1.BareMetalHost]

// Provision implements claim.Adapter: the host gets the image and the Machine's bootstrap data (one
// update), and the machine follows the host until it reports "provisioned".
func (a *Adapter) Provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	m, host := s.Machine, s.Host
	if _, ok := host.Annotations[metal3v1.PausedAnnotation]; ok && !a.Facts(m).Provisioned {
		setCond(m, infrav1.YonderMetalMachineHostProvisionedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineHostPausedReason,
			fmt.Sprintf("BareMetalHost %s carries %s; remove it to continue", host.Name, metal3v1.PausedAnnotation))
		return ctrl.Result{}, nil
	}
	if !a.Facts(m).Provisioned {
		data := s.DataSecretName()
		if handOff(m, data, host.DeepCopy()) {
			if m.Spec.CustomDeploy != nil {
				problem, err := a.disklessDataProblem(ctx, m, data)
				if err != nil {
					return ctrl.Result{}, err
				}
				if problem != "" {
					setCond(m, infrav1.YonderMetalMachineHostProvisionedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineBootstrapDataUnsupportedReason, problem)
					return ctrl.Result{}, nil // a new bootstrap data Secret (a rollout) comes with a new Machine
				}
			}
			ctrl.LoggerFrom(ctx).Info("Handing image and bootstrap data to host")
			var err error
			if host, err = a.updateHost(ctx, m, host, func(h *metal3v1.BareMetalHost) bool { return handOff(m, data, h) }); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	st := host.Status.Provisioning.State
	m.Status.HostState = string(st)
	if host.Status.ErrorType != "" {
		setCond(m, infrav1.YonderMetalMachineHostProvisionedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineHostErrorReason,
			fmt.Sprintf("BareMetalHost %s reports %s: %s. Fix the host (see its status and events); a MachineHealthCheck or deleting the Machine releases it", host.Name, host.Status.ErrorType, host.Status.ErrorMessage))
		return ctrl.Result{}, nil
	}
	if st != metal3v1.StateProvisioned {
		if !a.Facts(m).Provisioned {
			setCond(m, infrav1.YonderMetalMachineHostProvisionedCondition, metav1.ConditionFalse, infrav1.YonderMetalMachineHostProvisioningReason,
				fmt.Sprintf("BareMetalHost %s is %q", host.Name, st))
		}
		return ctrl.Result{}, nil
	}
	m.Status.Addresses = Addresses(host, a.inventory(ctx, m, host))
	if m.Spec.ProviderID == "" {
		m.Spec.ProviderID = ProviderID(m.Namespace, host.Name)
		ctrl.LoggerFrom(ctx).Info("Host provisioned", "providerID", m.Spec.ProviderID)
	}
	m.Status.Initialization.Provisioned = ptr.To(true)
	setCond(m, infrav1.YonderMetalMachineHostProvisionedCondition, metav1.ConditionTrue, infrav1.YonderMetalMachineHostProvisionedReason, "")
	return ctrl.Result{}, nil
}

// inventory returns what host's networkData and metaData Secrets say about its addresses and hostname.
// They were read and checked when the host received its config drive; one that is gone or unreadable now
// only leaves its part out of the Machine's addresses (logged), it does not hold the Machine up.
//
// The config drive was written once, when this claim provisioned the host: a Secret's later content
// never reaches the host. So a complete read is kept (provisionedData) and later passes of the same claim
// with the same Secret references read nothing; they come often for a provisioned Machine (every change
// of its host or its Machine) and both Secrets are uncached reads. A restarted manager reads once again.
func (a *Adapter) inventory(ctx context.Context, m *infrav1.YonderMetalMachine, host *metal3v1.BareMetalHost) Inventory {
	key := provisionedDataKey{host: host.UID, claim: claim.ID(m, infrav1.ClaimIDAnnotation),
		metaData: ptr.Deref(host.Spec.MetaData, corev1.SecretReference{}), networkData: ptr.Deref(host.Spec.NetworkData, corev1.SecretReference{})}
	if inv, ok := a.provisioned.get(key); ok {
		return inv
	}
	var inv Inventory
	complete := true
	log := ctrl.LoggerFrom(ctx)
	if md, err := hostdata.MetaData(ctx, a.Client, host); err != nil {
		complete = false
		log.Info("Leaving the host's metaData out of the Machine's addresses", "reason", err.Error())
	} else {
		inv.Hostname = hostdata.Hostname(md)
	}
	nd, err := hostdata.NetworkData(ctx, a.Client, host)
	if err == nil && nd != nil {
		inv.Static, err = hostdata.StaticAddresses(nd)
	}
	if err != nil {
		complete = false
		log.Info("Leaving the host's networkData out of the Machine's addresses", "reason", err.Error())
	}
	if complete {
		a.provisioned.put(key, inv)
	}
	return inv
}

// disklessDataProblem says why the Machine's bootstrap data cannot run in a diskless host's ramdisk (""
// when it can). The ramdisk carries out Yonder's cloud-config (write_files and runcmd) itself, as the SSH
// provider does; a kubeadm cloud-config (CABPK's), Ignition or any other cloud-init module would fail only
// after the host PXE-booted and attested, three times. So it is checked before the host is handed anything.
func (a *Adapter) disklessDataProblem(ctx context.Context, m *infrav1.YonderMetalMachine, name string) (string, error) {
	sec := &corev1.Secret{}
	if err := a.APIReader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, sec); err != nil {
		return "", fmt.Errorf("failed to read bootstrap data Secret %s: %w", name, err)
	}
	use := "use Yonder's bootstrap provider (YonderConfig) for diskless Machines, or an image"
	if f := string(sec.Data["format"]); f != "" && f != "cloud-config" {
		return fmt.Sprintf("customDeploy %s runs the bootstrap data in the host's ramdisk as Yonder's cloud-config, and Secret %s has format %q: %s",
			infrav1.DisklessDeployMethod, name, f, use), nil
	}
	// Parse's errors name the offending module or line, never the data's values.
	if _, err := cloudconfig.Parse(sec.Data["value"]); err != nil {
		return fmt.Sprintf("customDeploy %s runs the bootstrap data in the host's ramdisk, which carries out write_files and runcmd only, and Secret %s's is not that (%v): %s",
			infrav1.DisklessDeployMethod, name, err, use), nil
	}
	return "", nil
}

// desiredImage converts the machine's image into Metal3's.
func desiredImage(m *infrav1.YonderMetalMachine) *metal3v1.Image {
	if m.Spec.Image == nil {
		return nil
	}
	img := &metal3v1.Image{URL: m.Spec.Image.URL, Checksum: m.Spec.Image.Checksum, ChecksumType: metal3v1.ChecksumType(m.Spec.Image.ChecksumType)}
	if m.Spec.Image.Format != "" {
		img.DiskFormat = ptr.To(string(m.Spec.Image.Format))
	}
	return img
}

// handOff sets what the host needs to provision for m on h; it reports whether h changed.
func handOff(m *infrav1.YonderMetalMachine, dataSecret string, h *metal3v1.BareMetalHost) bool {
	before := h.Spec.DeepCopy()
	h.Spec.Image = desiredImage(m)
	if m.Spec.CustomDeploy != nil {
		h.Spec.CustomDeploy = &metal3v1.CustomDeploy{Method: m.Spec.CustomDeploy.Method}
	} else {
		h.Spec.CustomDeploy = nil
	}
	// The Machine's bootstrap data Secret is referenced where it is (same namespace, key "value"),
	// not copied: no second copy of a join token to keep in sync and delete.
	h.Spec.UserData = &corev1.SecretReference{Name: dataSecret, Namespace: m.Namespace}
	h.Spec.Online = true
	if m.Spec.AutomatedCleaningMode != "" {
		h.Spec.AutomatedCleaningMode = metal3v1.AutomatedCleaningMode(m.Spec.AutomatedCleaningMode)
	}
	return !equality.Semantic.DeepEqual(before, &h.Spec)
}

func setCond(m *infrav1.YonderMetalMachine, t string, status metav1.ConditionStatus, reason, msg string) {
	claim.SetCondition(m, t, status, reason, msg)
}
