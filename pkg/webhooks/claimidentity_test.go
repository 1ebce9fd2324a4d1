package webhooks

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/claim"
)

// configMapHosts is a claim.Inventory of ConfigMaps; these tests never read a host.
type configMapHosts struct {
	claim.Inventory[*corev1.ConfigMap]
}

func (configMapHosts) HostKind() string { return "ConfigMap" }

// ClaimIdentity keeps the checks the webhook had and adds pkg/claim's: on update the identity may not
// be changed; on create without an identity no host is read (the reader here is nil). The API-server
// tests of both providers (TestClaimIdentityIsNotUserWritable) cover the rest.
func TestClaimIdentityKeepsTheWebhooksOwnChecks(t *testing.T) {
	g := NewWithT(t)
	const key = "example.test/claim-id"
	own := field.ErrorList{field.Forbidden(field.NewPath("data"), "own check")}
	v := ClaimIdentity(&Validator[*corev1.ConfigMap]{
		Kind:   kind,
		Change: func(context.Context, *corev1.ConfigMap, *corev1.ConfigMap) field.ErrorList { return own },
		Create: func(context.Context, *corev1.ConfigMap) field.ErrorList { return own },
	}, configMapHosts{}, key, nil, func() client.ObjectList { return &corev1.ConfigMapList{} })

	_, err := v.ValidateCreate(context.Background(), cm("a"))
	g.Expect(err).To(MatchError(ContainSubstring("data: Forbidden: own check")))
	old, cur := cm("a"), cm("a")
	old.Annotations = map[string]string{key: "uid-1"}
	cur.Annotations = map[string]string{key: "uid-2"}
	_, err = v.ValidateUpdate(context.Background(), old, cur)
	g.Expect(err).To(MatchError(And(ContainSubstring("data: Forbidden: own check"),
		ContainSubstring("metadata.annotations[example.test/claim-id]: Forbidden: the claim identity uid-1 is recorded by the controller"))))
}
