package admission

import (
	"strings"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/hostpool"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/pkg/webhooks"
)

// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalmachine,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachines,versions=v1alpha1,name=validation.yondermetalmachine.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1
// +kubebuilder:webhook:verbs=create;update,path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-yondermetalmachinetemplate,mutating=false,failurePolicy=fail,matchPolicy=Equivalent,groups=infrastructure.cluster.x-k8s.io,resources=yondermetalmachinetemplates,versions=v1alpha1,name=validation.yondermetalmachinetemplate.infrastructure.cluster.x-k8s.io,sideEffects=None,admissionReviewVersions=v1

// machineSpec is what is checked of a YonderMetalMachine's spec (validateMachineSpec); what the host was
// given and chosen by is fixed once the machine exists; providerID is set once.
var machineSpec = webhooks.MachineSpec[infrav1.YonderMetalMachineSpec]{
	Validate: validateMachineSpec,
	Fixed: []webhooks.Fixed[infrav1.YonderMetalMachineSpec]{
		{Path: "hostSelector", Get: func(s *infrav1.YonderMetalMachineSpec) any { return s.HostSelector }, Message: "is immutable"},
		{Path: "image", Get: func(s *infrav1.YonderMetalMachineSpec) any { return []any{s.Image, s.CustomDeploy} },
			Message: "image and customDeploy are immutable: roll out a new YonderMetalMachineTemplate instead"},
	},
	ProviderID: func(s *infrav1.YonderMetalMachineSpec) string { return s.ProviderID },
}

// YonderMetalMachine validates YonderMetalMachines: the spec (machineSpec), and the claim identity
// annotation, which only the controller writes and only clusterctl move carries over (pkg/claim's
// IdentityChange and IdentityOnCreate, as for YonderSSHMachines); hosts reads the namespace's
// BareMetalHosts uncached.
func YonderMetalMachine(hosts client.Reader) *webhooks.Validator[*infrav1.YonderMetalMachine] {
	v := webhooks.InfrastructureMachine(kind("YonderMetalMachine"), func(m *infrav1.YonderMetalMachine) *infrav1.YonderMetalMachineSpec { return &m.Spec }, machineSpec)
	return webhooks.ClaimIdentity(v, hostpool.Pool{}, infrav1.ClaimIDAnnotation, hosts, func() client.ObjectList { return &metal3v1.BareMetalHostList{} })
}

// YonderMetalMachineTemplate validates YonderMetalMachineTemplates: the machine spec, and the template is
// immutable.
func YonderMetalMachineTemplate() *webhooks.Validator[*infrav1.YonderMetalMachineTemplate] {
	return webhooks.InfrastructureMachineTemplate(kind("YonderMetalMachineTemplate"),
		func(t *infrav1.YonderMetalMachineTemplate) *infrav1.YonderMetalMachineSpec {
			return &t.Spec.Template.Spec
		}, machineSpec)
}

// validateMachineSpec checks what the API server's schema cannot: the image/customDeploy choice (and
// the one customDeploy method Yonder implements, yonder-diskless) and Metal3's checksum rules, so a host is never handed an image it would refuse after being claimed.
func validateMachineSpec(s *infrav1.YonderMetalMachineSpec, p *field.Path) field.ErrorList {
	errs := webhooks.HostSelector(s.HostSelector.LabelSelector(), p.Child("hostSelector"))
	switch {
	case s.Image == nil && s.CustomDeploy == nil:
		errs = append(errs, field.Required(p.Child("image"), "set image (or customDeploy) so the host has something to boot"))
	case s.Image != nil && s.CustomDeploy != nil:
		errs = append(errs, field.Forbidden(p.Child("customDeploy"), "set either image or customDeploy, not both"))
	}
	// The schema's enum says the same to the API server; this keeps the message when the schema is older
	// than the webhook (and in the webhook's unit tests, which have no schema).
	if cd := s.CustomDeploy; cd != nil && cd.Method != infrav1.DisklessDeployMethod {
		errs = append(errs, field.NotSupported(p.Child("customDeploy", "method"), cd.Method, []string{infrav1.DisklessDeployMethod}))
	}
	if img := s.Image; img != nil {
		ip := p.Child("image")
		// No URL or checksum holds whitespace or control characters; one that does is a mistake or an attack.
		for _, v := range []struct {
			path  *field.Path
			value string
		}{{ip.Child("url"), img.URL}, {ip.Child("checksum"), img.Checksum}, {ip.Child("checksumType"), string(img.ChecksumType)}} {
			if err := inventory.CheckBootValue(v.path.String(), v.value); err != nil {
				errs = append(errs, field.Invalid(v.path, v.value, err.Error()))
			}
		}
		oci := strings.HasPrefix(strings.ToLower(img.URL), "oci://")
		if img.Checksum == "" && img.Format != infrav1.LiveISOFormat && !oci {
			errs = append(errs, field.Required(ip.Child("checksum"), "a checksum is required unless format is live-iso or the url is oci://"))
		}
		if img.Checksum != "" && img.ChecksumType == "" && !strings.Contains(img.Checksum, "://") {
			errs = append(errs, field.Required(ip.Child("checksumType"), "say which algorithm the checksum uses (md5, sha256, sha512 or auto)"))
		}
		if img.Format == "vdi" || img.Format == "vmdk" {
			errs = append(errs, field.NotSupported(ip.Child("format"), img.Format, []string{"raw", "qcow2", string(infrav1.LiveISOFormat)}))
		}
		if img.Format == infrav1.LiveISOFormat && oci {
			errs = append(errs, field.Invalid(ip.Child("url"), img.URL, "a live ISO is downloaded by the boot server over http or https, not from a registry"))
		}
		if img.Format == infrav1.LiveISOFormat && s.AutomatedCleaningMode == "metadata" {
			errs = append(errs, field.Invalid(p.Child("automatedCleaningMode"), s.AutomatedCleaningMode, "a live-iso host writes nothing to disk; use disabled or leave it empty"))
		}
	}
	return errs
}
