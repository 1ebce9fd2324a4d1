package yondercontrolplane

import (
	"fmt"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// releaseVersion reduces an API server's gitVersion to vMAJOR.MINOR.PATCH. Managed offerings append vendor
// tags (v1.30.4-eks-a737599, v1.31.2+k3s1, v1.30.5-gke.1014001); CAPI compares status.version with
// spec.version as semver, where such a tag reads as a pre-release and would make the cluster look older
// than the release it runs, holding worker upgrades forever.
func releaseVersion(gitVersion string) (string, error) {
	v, err := semver.ParseTolerant(gitVersion)
	if err != nil {
		return "", fmt.Errorf("failed to parse the API server version %q: %w", gitVersion, err)
	}
	return fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch), nil
}

// setVersionCondition compares the version the attached cluster runs with spec.version. Yonder never
// upgrades an attached control plane, so a cluster older than requested is a task for its own tooling.
func setVersionCondition(cp *controlplanev1.YonderControlPlane, running string) {
	if cp.Spec.Version == "" {
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneVersionUpToDateCondition, Status: metav1.ConditionTrue,
			Reason: controlplanev1.YonderControlPlaneVersionNotRequestedReason, Message: fmt.Sprintf("spec.version is empty; the attached cluster runs %s", running)})
		return
	}
	want, err := semver.ParseTolerant(cp.Spec.Version)
	if err != nil {
		// The API server's pattern and the webhook reject such a value; this only guards older objects.
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneVersionUpToDateCondition, Status: metav1.ConditionFalse,
			Reason: controlplanev1.YonderControlPlaneVersionUpgradeRequiredReason, Message: fmt.Sprintf("spec.version %q is not a Kubernetes version; set it like v1.36.3", cp.Spec.Version)})
		return
	}
	have, err := semver.ParseTolerant(running)
	if err != nil {
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneVersionUpToDateCondition, Status: metav1.ConditionUnknown,
			Reason: controlplanev1.YonderControlPlaneVersionUnknownReason, Message: err.Error()})
		return
	}
	want.Pre, want.Build = nil, nil
	if have.LT(want) {
		conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneVersionUpToDateCondition, Status: metav1.ConditionFalse,
			Reason:  controlplanev1.YonderControlPlaneVersionUpgradeRequiredReason,
			Message: fmt.Sprintf("The attached cluster runs %s but spec.version is %s; upgrade its control plane with its own tooling (Yonder does not upgrade attached clusters); CAPI holds worker upgrades until then", running, cp.Spec.Version)})
		return
	}
	conditions.Set(cp, metav1.Condition{Type: controlplanev1.YonderControlPlaneVersionUpToDateCondition, Status: metav1.ConditionTrue,
		Reason: controlplanev1.YonderControlPlaneVersionUpToDateReason, Message: fmt.Sprintf("The attached cluster runs %s (spec.version %s)", running, cp.Spec.Version)})
}
