package sshmachine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// The controller reuses a credentials Secret it read a moment ago (sshmachine.CredentialsTTL). A pool's key
// rotated in that moment — the hosts authorize only the new key and the Secret holds it — must not show as
// a failed connection: the host refuses the remembered key, the controller reads the Secret again and
// connects with the new one. Two real sshd hosts share one Secret: the first Machine's bootstrap reads it,
// then the key is rotated and the second Machine is created at once, well inside the TTL; it bootstraps
// with no SSHAuthFailed, neither as its condition's reason nor as an Event.
func TestRotatedCredentialsAreReadAgain(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "rot").Name
	hs, keyPEM := sshhosts.StartForTest(t, "rot", 2)
	registerHosts(g, ns, hs, keyPEM, nil, nil)
	startProvider(t, testOptions())
	cluster := newCluster(t, g, ns, "rot")
	data := dataSecret(g, ns, "data", cluster.Name, "#cloud-config\nruncmd:\n- mkdir -p /run/cluster-api && touch /run/cluster-api/bootstrap-success.complete\n")

	newMachine(g, ns, cluster.Name, "first", "rot-0", data.Name)
	g.Eventually(reasonOf(ns, "first", infrav1.YonderSSHMachineBootstrapExecutedCondition)).Should(Equal(infrav1.YonderSSHMachineBootstrapSucceededReason))

	// Rotate: rot-1 authorizes only the new key, and the pool's Secret holds it.
	newPEM, newSigner, err := sshhosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(hs[1].Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(newSigner.PublicKey()), 0o600)).To(Succeed())
	secret := &corev1.Secret{}
	g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ssh-" + hs[0].Name}, secret)).To(Succeed())
	secret.Data[hostconn.PrivateKeyKey] = newPEM
	g.Expect(env.Update(ctx, secret)).To(Succeed())

	newMachine(g, ns, cluster.Name, "second", "rot-1", data.Name)
	var reasons []string
	g.Eventually(func() (string, error) {
		r, err := reasonOf(ns, "second", infrav1.YonderSSHMachineBootstrapExecutedCondition)()
		if err == nil && (len(reasons) == 0 || reasons[len(reasons)-1] != r) {
			reasons = append(reasons, r)
		}
		return r, err
	}).Should(Equal(infrav1.YonderSSHMachineBootstrapSucceededReason))
	g.Expect(reasons).NotTo(ContainElement(infrav1.SSHAuthFailedReason), "the rotated key never showed as a failed connection")
	events := &corev1.EventList{}
	g.Expect(env.List(ctx, events, client.InNamespace(ns))).To(Succeed())
	for _, e := range events.Items {
		g.Expect(e.Reason+" "+e.Message).NotTo(ContainSubstring(infrav1.SSHAuthFailedReason), "Event on %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name)
	}
}
