// Package admission holds the validating webhooks of the bare-metal provider: host selectors are valid
// label selectors, a machine boots exactly one of an image or a custom deploy method, image checksums
// are present where Metal3 requires them, and templates are immutable (except for ClusterClass dry-runs).
package admission

import (
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// SetupWebhooks registers every webhook of the provider.
func SetupWebhooks(mgr ctrl.Manager) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderMetalMachine{}).WithValidator(&YonderMetalMachine{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderMetalMachineTemplate{}).WithValidator(&YonderMetalMachineTemplate{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderMetalCluster{}).WithValidator(&YonderMetalCluster{}).Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.YonderMetalClusterTemplate{}).WithValidator(&YonderMetalClusterTemplate{}).Complete()
}

func validateSelector(s infrav1.HostSelector, p *field.Path) field.ErrorList {
	if _, err := metav1.LabelSelectorAsSelector(s.LabelSelector()); err != nil {
		return field.ErrorList{field.Invalid(p, s, "not a valid label selector: "+err.Error())}
	}
	return nil
}

// validateMachineSpec checks what the API server's schema cannot: the image/customDeploy choice and
// Metal3's checksum rules, so a host is never handed an image it would refuse after being claimed.
func validateMachineSpec(s *infrav1.YonderMetalMachineSpec, p *field.Path) field.ErrorList {
	errs := validateSelector(s.HostSelector, p.Child("hostSelector"))
	switch {
	case s.Image == nil && s.CustomDeploy == nil:
		errs = append(errs, field.Required(p.Child("image"), "set image (or customDeploy) so the host has something to boot"))
	case s.Image != nil && s.CustomDeploy != nil:
		errs = append(errs, field.Forbidden(p.Child("customDeploy"), "set either image or customDeploy, not both"))
	}
	if img := s.Image; img != nil {
		ip := p.Child("image")
		oci := strings.HasPrefix(strings.ToLower(img.URL), "oci://")
		if img.Checksum == "" && img.Format != infrav1.LiveISOFormat && !oci {
			errs = append(errs, field.Required(ip.Child("checksum"), "a checksum is required unless format is live-iso or the url is oci://"))
		}
		if img.Checksum != "" && img.ChecksumType == "" && !strings.Contains(img.Checksum, "://") {
			errs = append(errs, field.Required(ip.Child("checksumType"), "say which algorithm the checksum uses (md5, sha256, sha512 or auto)"))
		}
		if img.Format == infrav1.LiveISOFormat && s.AutomatedCleaningMode == "metadata" {
			errs = append(errs, field.Invalid(p.Child("automatedCleaningMode"), s.AutomatedCleaningMode, "a live-iso host writes nothing to disk; use disabled or leave it empty"))
		}
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
