// Package admission holds the validating webhooks of the bare-metal provider: host selectors are valid
// label selectors, a machine boots exactly one of an image or a custom deploy method, image checksums
// are present where Metal3 requires them, a machine's claim identity is the controller's to record
// (pkg/claim), templates are immutable (except for ClusterClass dry-runs; remediation templates may
// change), and a remediation's strategy is Reboot with a sane retry limit and timeout. BareMetalHosts that
// Yonder manages get Metal3's immutability rules, a unique boot MAC and boot values that fit an iPXE
// script (BareMetalHost).
// Every kind is a pkg/webhooks Validator; Webhooks lists their registrations.
package admission

import (
	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// Webhooks returns the registrations of every webhook of the provider.
func Webhooks() []webhooks.Registration {
	return []webhooks.Registration{
		func(mgr ctrl.Manager) error {
			return webhooks.For(&infrav1.YonderMetalMachine{}, YonderMetalMachine(mgr.GetAPIReader()))(mgr)
		},
		webhooks.For(&infrav1.YonderMetalMachineTemplate{}, YonderMetalMachineTemplate()),
		webhooks.For(&infrav1.YonderMetalCluster{}, YonderMetalCluster()),
		webhooks.For(&infrav1.YonderMetalClusterTemplate{}, YonderMetalClusterTemplate()),
		webhooks.For(&infrav1.YonderMetalRemediation{}, YonderMetalRemediation()),
		webhooks.For(&infrav1.YonderMetalRemediationTemplate{}, YonderMetalRemediationTemplate()),
		func(mgr ctrl.Manager) error {
			return webhooks.For(&metal3v1.BareMetalHost{}, BareMetalHost(mgr.GetAPIReader()))(mgr)
		},
	}
}

func kind(k string) schema.GroupKind { return infrav1.GroupVersion.WithKind(k).GroupKind() }
