package admission

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// nodeRestrictionDomain is the label domain the NodeRestriction admission plugin keeps kubelets from
// setting, changing or removing on their own Node (node-restriction.kubernetes.io and its subdomains).
// CAPI copies labels of this domain from a Machine to its Node, and an admin can set them with kubectl.
const nodeRestrictionDomain = "node-restriction.kubernetes.io"

// kubeletProofKeys refuses a Node selector that matches labels a Node's own kubelet can set: a compromised
// node could otherwise label itself into a Site (and receive its peers) or into a GatewayPool (and carry
// the Site's traffic). Every key must be in nodeRestrictionDomain.
func kubeletProofKeys(path *field.Path, sel *metav1.LabelSelector) field.ErrorList {
	if sel == nil {
		return nil
	}
	var errs field.ErrorList
	check := func(p *field.Path, key string) {
		domain, _, ok := strings.Cut(key, "/")
		if ok && (domain == nodeRestrictionDomain || strings.HasSuffix(domain, "."+nodeRestrictionDomain)) {
			return
		}
		errs = append(errs, field.Invalid(p, key, "a Node's own kubelet can set this label, so a compromised node could select itself; "+
			"use a label in the "+nodeRestrictionDomain+" domain (e.g. "+nodeRestrictionDomain+"/yonder-site), which only admins and CAPI's Machine label sync can set"))
	}
	for k := range sel.MatchLabels {
		check(path.Child("matchLabels").Key(k), k)
	}
	for i, e := range sel.MatchExpressions {
		check(path.Child("matchExpressions").Index(i).Child("key"), e.Key)
	}
	return errs
}
