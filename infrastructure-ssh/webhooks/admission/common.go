// Package admission holds the validating webhooks of the SSH provider: secret references stay in the
// object's namespace, host keys parse, host selectors are valid label selectors, templates are immutable.
package admission

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
)

// SetupWebhooks registers every webhook of the provider.
func SetupWebhooks(mgr ctrl.Manager) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderSSHHost{}).WithValidator(&YonderSSHHost{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderSSHMachine{}).WithValidator(&YonderSSHMachine{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderSSHMachineTemplate{}).WithValidator(&YonderSSHMachineTemplate{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderSSHCluster{}).WithValidator(&YonderSSHCluster{}).Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderSSHClusterTemplate{}).WithValidator(&YonderSSHClusterTemplate{}).Complete()
}

func validateSelector(s infrav1.HostSelector, p *field.Path) field.ErrorList {
	if _, err := metav1.LabelSelectorAsSelector(s.LabelSelector()); err != nil {
		return field.ErrorList{field.Invalid(p, s, "not a valid label selector: "+err.Error())}
	}
	return nil
}

func validateEndpoint(e infrav1.SSHEndpoint, ns string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if e.CredentialsSecretRef.Namespace != "" && e.CredentialsSecretRef.Namespace != ns {
		errs = append(errs, field.Forbidden(p.Child("credentialsSecretRef", "namespace"),
			"the credentials Secret must be in the object's namespace "+ns))
	}
	if e.HostKey != "" {
		if _, err := sshexec.ParseHostKey(e.HostKey); err != nil {
			errs = append(errs, field.Invalid(p.Child("hostKey"), e.HostKey, "must be one public key in authorized_keys format, e.g. the content of /etc/ssh/ssh_host_ed25519_key.pub"))
		}
	}
	if e.HostKey == "" && e.HostKeyPolicy != infrav1.HostKeyPolicyTrustOnFirstUse {
		errs = append(errs, field.Required(p.Child("hostKey"), "a host key must be pinned unless hostKeyPolicy is TrustOnFirstUse"))
	}
	return errs
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: infrav1.GroupVersion.Group, Kind: kind}, name, errs)
}

func sameSpec(a, b any) bool { return reflect.DeepEqual(a, b) }
