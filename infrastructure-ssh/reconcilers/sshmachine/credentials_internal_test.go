package sshmachine

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// countingReader counts the Gets that reach the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, obj, opts...)
}

func TestCredentialsMemo(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "key"}, Data: map[string][]byte{"ssh-privatekey": []byte("one")}}
	key := client.ObjectKeyFromObject(secret)
	for _, tc := range []struct {
		name string
		// between runs between the two reads.
		between  func(c *credentialsMemo, now *time.Time)
		wantGets int
	}{
		{name: "second read within the TTL is the memo's", between: func(*credentialsMemo, *time.Time) {}, wantGets: 1},
		{name: "read again after the TTL", between: func(_ *credentialsMemo, now *time.Time) { *now = now.Add(CredentialsTTL) }, wantGets: 2},
		{name: "read again after forget", between: func(c *credentialsMemo, _ *time.Time) { c.forget() }, wantGets: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			now := time.Unix(1000, 0)
			c := &credentialsMemo{now: func() time.Time { return now }}
			api := &countingReader{Reader: fake.NewClientBuilder().WithObjects(secret.DeepCopy()).Build()}
			for i := range 2 {
				hit := false
				got := &corev1.Secret{}
				g.Expect(c.reader(nil, api, &hit).Get(context.Background(), key, got)).To(Succeed())
				g.Expect(got.Data).To(Equal(secret.Data))
				// What a caller does with its copy never reaches the memo.
				got.Data["ssh-privatekey"] = []byte("changed")
				if i == 0 {
					g.Expect(hit).To(BeFalse())
					tc.between(c, &now)
				}
			}
			g.Expect(api.gets).To(Equal(tc.wantGets))
		})
	}
}

func TestCredentialsMemoKeepsOnlySecrets(t *testing.T) {
	g := NewWithT(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}}
	api := &countingReader{Reader: fake.NewClientBuilder().WithObjects(cm).Build()}
	c := &credentialsMemo{}
	hit := false
	for range 2 {
		g.Expect(c.reader(nil, api, &hit).Get(context.Background(), client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})).To(Succeed())
	}
	g.Expect(api.gets).To(Equal(2))
	g.Expect(hit).To(BeFalse())
	// A Secret that is not there is not remembered either.
	g.Expect(c.reader(nil, api, &hit).Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "missing"}, &corev1.Secret{})).NotTo(Succeed())
	g.Expect(c.secrets).To(BeEmpty())
}
