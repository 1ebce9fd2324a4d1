package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostpool"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachines,versions=v1alpha1,name=validation.yondersshmachine.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondersshmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondersshmachinetemplates,versions=v1alpha1,name=validation.yondersshmachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// machineSpec is what is checked of a YonderSSHMachine's spec: the host selector parses and is fixed once
// the machine exists; providerID is set once.
var machineSpec = webhooks.MachineSpec[infrav1.YonderSSHMachineSpec]{
	Validate: func(s *infrav1.YonderSSHMachineSpec, p *field.Path) field.ErrorList {
		return webhooks.HostSelector(s.HostSelector.LabelSelector(), p.Child("hostSelector"))
	},
	Fixed: []webhooks.Fixed[infrav1.YonderSSHMachineSpec]{
		{Path: "hostSelector", Get: func(s *infrav1.YonderSSHMachineSpec) any { return s.HostSelector }, Message: "is immutable"},
	},
	ProviderID: func(s *infrav1.YonderSSHMachineSpec) string { return s.ProviderID },
}

// YonderSSHMachine validates YonderSSHMachines: the spec (machineSpec), and the claim identity
// annotation, which only the controller writes and only clusterctl move carries over (pkg/claim's
// IdentityChange and IdentityOnCreate); hosts reads the namespace's YonderSSHHosts uncached.
func YonderSSHMachine(hosts client.Reader) *webhooks.Validator[*infrav1.YonderSSHMachine] {
	v := webhooks.InfrastructureMachine(kind("YonderSSHMachine"), func(m *infrav1.YonderSSHMachine) *infrav1.YonderSSHMachineSpec { return &m.Spec }, machineSpec)
	return webhooks.ClaimIdentity(v, hostpool.Pool{}, infrav1.ClaimIDAnnotation, hosts, func() client.ObjectList { return &infrav1.YonderSSHHostList{} })
}

// YonderSSHMachineTemplate validates YonderSSHMachineTemplates: the machine spec, and the template is
// immutable.
func YonderSSHMachineTemplate() *webhooks.Validator[*infrav1.YonderSSHMachineTemplate] {
	return webhooks.InfrastructureMachineTemplate(kind("YonderSSHMachineTemplate"),
		func(t *infrav1.YonderSSHMachineTemplate) *infrav1.YonderSSHMachineSpec { return &t.Spec.Template.Spec }, machineSpec)
}
