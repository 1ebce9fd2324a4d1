package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshhost,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshhosts,versions=v1alpha1,name=validation.yondersshhost.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// YonderSSHHost validates YonderSSHHosts: endpoints (and the bastion's) are usable; a claimed host keeps
// its address, port, user, credentials and host key, its claim is never handed to another consumer, and a
// recorded host key is never cleared into trust on first use without an explicit policy change.
func YonderSSHHost() *webhooks.Validator[*infrav1.YonderSSHHost] {
	return &webhooks.Validator[*infrav1.YonderSSHHost]{Kind: kind("YonderSSHHost"), Validate: validateHost, Change: hostChange}
}

func validateHost(h *infrav1.YonderSSHHost) field.ErrorList {
	p := field.NewPath("spec")
	errs := validateEndpoint(h.Spec.SSHEndpoint, h.Namespace, p)
	if h.Spec.Bastion != nil {
		errs = append(errs, validateEndpoint(*h.Spec.Bastion, h.Namespace, p.Child("bastion"))...)
		if h.Spec.Bastion.HostKeyPolicy == infrav1.HostKeyPolicyTrustOnFirstUse && h.Spec.Bastion.HostKey == "" {
			errs = append(errs, field.Required(p.Child("bastion", "hostKey"), "a bastion's host key must be pinned (trust on first use is for hosts only)"))
		}
	}
	return errs
}

func hostChange(_ context.Context, old, h *infrav1.YonderSSHHost) field.ErrorList {
	p := field.NewPath("spec")
	errs := hostKeyChange(old.Spec.SSHEndpoint, h.Spec.SSHEndpoint, p)
	if old.Spec.ConsumerRef == nil {
		return errs
	}
	// A claimed host's identity must not change under its Machine: it was chosen, and its Node runs,
	// at this endpoint, with these credentials and this host key (also in the update that releases it).
	errs = append(errs, claimedEndpointFixed(old.Spec.SSHEndpoint, h.Spec.SSHEndpoint, p)...)
	if h.Spec.ConsumerRef != nil && old.Spec.ConsumerRef.UID != h.Spec.ConsumerRef.UID {
		// A claim can only be recorded on a free host or cleared; it cannot be handed to another consumer.
		errs = append(errs, field.Forbidden(p.Child("consumerRef"), "the host is claimed by "+old.Spec.ConsumerRef.Name+"; it must be released before another machine claims it"))
	}
	return errs
}

// claimedEndpointFixed forbids, with one error per field, changing what a claimed host is reached by.
func claimedEndpointFixed(old, cur infrav1.SSHEndpoint, p *field.Path) field.ErrorList {
	const msg = "cannot change while the host is claimed by a machine; delete its Machine first"
	var errs field.ErrorList
	for _, f := range []struct {
		name     string
		old, cur any
	}{
		{"address", old.Address, cur.Address},
		{"port", old.Port, cur.Port},
		{"user", old.User, cur.User},
		{"credentialsSecretRef", old.CredentialsSecretRef, cur.CredentialsSecretRef},
		{"hostKey", old.HostKey, cur.HostKey},
		{"hostKeyPolicy", old.HostKeyPolicy, cur.HostKeyPolicy},
	} {
		errs = append(errs, webhooks.Unchanged(f.old, f.cur, p.Child(f.name), msg)...)
	}
	return errs
}

// hostKeyChange keeps a recorded host key from being dropped in a way that silently trusts the next
// key presented: clearing spec.hostKey re-arms trust on first use only in an update that also switches
// hostKeyPolicy from Pinned to TrustOnFirstUse (the controller sets Pinned when it records a key).
func hostKeyChange(old, cur infrav1.SSHEndpoint, p *field.Path) field.ErrorList {
	if old.HostKey == "" || cur.HostKey != "" || cur.HostKeyPolicy != infrav1.HostKeyPolicyTrustOnFirstUse {
		return nil
	}
	if old.HostKeyPolicy == infrav1.HostKeyPolicyTrustOnFirstUse {
		return field.ErrorList{field.Forbidden(p.Child("hostKey"),
			"clearing a recorded host key would trust whatever key the host presents next; to re-arm trust on first use, clear it in the update that changes hostKeyPolicy from Pinned to TrustOnFirstUse, or pin the new key")}
	}
	return nil
}

// validateEndpoint checks an SSH endpoint: its credentials Secret is local, its host key parses, and a
// key is pinned unless trust-on-first-use is asked for.
func validateEndpoint(e infrav1.SSHEndpoint, ns string, p *field.Path) field.ErrorList {
	errs := webhooks.LocalSecret(e.CredentialsSecretRef.Namespace, ns, p.Child("credentialsSecretRef", "namespace"))
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
