package host

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// startAgent runs a real ssh-agent on a socket of the test and returns the socket.
func startAgent(t *testing.T, g *WithT) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command("ssh-agent", "-D", "-a", sock)
	g.Expect(cmd.Start()).To(Succeed())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	g.Eventually(func() error { _, err := os.Stat(sock); return err }).WithTimeout(30 * time.Second).Should(Succeed())
	return sock
}

func sshAdd(t *testing.T, g *WithT, sock string, args ...string) {
	t.Helper()
	cmd := exec.Command("ssh-add", args...)
	cmd.Env = []string{"SSH_AUTH_SOCK=" + sock, "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
}

// loginWith runs `true` on h with key alone, pinning h's host key (what the SSH provider does).
func loginWith(h *hosts.Host, keyPEM []byte) error {
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return err
	}
	cl, err := ssh.Dial("tcp", net.JoinHostPort(h.Address.String(), "22"), &ssh.ClientConfig{User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(h.HostKey), Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	s, err := cl.NewSession()
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	return s.Run("true")
}

// `host add --ssh-agent` logs in with a key that only a real ssh-agent holds (loaded with ssh-add), pins the
// host key, authorizes a key of the provider's own in the host's authorized_keys, stores that key, not the
// agent's, and proves it logs in alone. Re-running keeps the key and adds no second line.
func TestAddWithSSHAgentAuthorizesTheProvidersOwnKey(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	hs, err := hosts.Start(ctx, n, "agent", 1, hosts.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	h := hs[0]
	authorized := filepath.Join(h.Dir, "authorized_keys")
	before, err := os.ReadFile(authorized)
	g.Expect(err).NotTo(HaveOccurred())

	sock := startAgent(t, g)
	t.Setenv("SSH_AUTH_SOCK", sock)
	ns := env.CreateNamespace(ctx, t, "host-agent").Name
	o, out := options(ns)
	add := func() error {
		return Add(ctx, o, &AddOptions{Name: "edge-a", Address: h.Address.String(), Port: 22, User: "root", SSHAgent: true,
			AuthorizedKeysFile: authorized, Timeout: 10 * time.Second})
	}

	// An empty agent is refused before anything is written.
	g.Expect(add()).To(MatchError(ContainSubstring("holds no keys")))

	sshAdd(t, g, sock, keyFile(t, h))
	g.Expect(add()).To(Succeed(), o.ErrOut.(interface{ String() string }).String())
	g.Expect(out.String()).To(ContainSubstring("edge-a created"))

	hostObj := &infrav1.YonderSSHHost{}
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-a"}, hostObj)).To(Succeed())
	pinned, err := parseKey(hostObj.Spec.HostKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pinned.Marshal()).To(Equal(h.HostKey.Marshal()))
	sec := &corev1.Secret{}
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-a-ssh"}, sec)).To(Succeed())
	providerPEM := sec.Data[PrivateKeyKey]
	g.Expect(providerPEM).NotTo(Equal(h.ClientKeyPEM), "the agent's key never leaves the agent")
	provider, err := ssh.ParsePrivateKey(providerPEM)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(provider.PublicKey().Type()).To(Equal(ssh.KeyAlgoED25519))
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(provider.PublicKey())))
	after, err := os.ReadFile(authorized)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(after)).To(Equal(string(before)+line+"\n"), "the provider's key appended once, the agent's kept")
	g.Expect(loginWith(h, providerPEM)).To(Succeed(), "the stored key logs in alone")

	// Again: the Secret's key is reused, authorized_keys unchanged.
	g.Expect(add()).To(Succeed())
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-a-ssh"}, sec)).To(Succeed())
	g.Expect(sec.Data[PrivateKeyKey]).To(Equal(providerPEM))
	again, err := os.ReadFile(authorized)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(after))

	// A wrong --authorized-keys-file: the key lands where sshd does not look, and host add says so.
	other := filepath.Join(t.TempDir(), "elsewhere")
	err = Add(ctx, o, &AddOptions{Name: "edge-b", Address: h.Address.String(), Port: 22, User: "root", SSHAgent: true,
		AuthorizedKeysFile: other, Timeout: 10 * time.Second})
	g.Expect(err).To(MatchError(ContainSubstring("does sshd read --authorized-keys-file")))
	g.Expect(apiGet(ctx, client.ObjectKey{Namespace: ns, Name: "edge-b"}, &infrav1.YonderSSHHost{})).NotTo(Succeed(), "nothing registered")

	// Without SSH_AUTH_SOCK --ssh-agent is refused before any connection.
	t.Setenv("SSH_AUTH_SOCK", "")
	g.Expect(add()).To(MatchError(ContainSubstring("--ssh-agent needs SSH_AUTH_SOCK")))
}
