// Package admission holds the validating webhooks of the SSH provider: secret references stay in the
// object's namespace, host keys parse, host selectors are valid label selectors, a claimed host keeps
// its address and consumer, and templates are immutable (except for ClusterClass dry-runs). Every kind
// is a pkg/webhooks Validator; Webhooks lists their registrations.
package admission

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// Webhooks returns the registrations of every webhook of the provider.
func Webhooks() []webhooks.Registration {
	return []webhooks.Registration{
		webhooks.For(&infrav1.YonderSSHHost{}, YonderSSHHost()),
		func(mgr ctrl.Manager) error {
			return webhooks.For(&infrav1.YonderSSHMachine{}, YonderSSHMachine(mgr.GetAPIReader()))(mgr)
		},
		webhooks.For(&infrav1.YonderSSHMachineTemplate{}, YonderSSHMachineTemplate()),
		webhooks.For(&infrav1.YonderSSHCluster{}, YonderSSHCluster()),
		webhooks.For(&infrav1.YonderSSHClusterTemplate{}, YonderSSHClusterTemplate()),
	}
}

func kind(k string) schema.GroupKind { return infrav1.GroupVersion.WithKind(k).GroupKind() }
