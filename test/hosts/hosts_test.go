package hosts_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"

	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
)

// Three hosts on one lab network, each a real sshd in its own namespace: a command runs on each over
// SSH with the pinned host key, each answers with its own hostname and address, and a client that pins
// the wrong host key is refused.
func TestHostsRunCommandsOverSSHWithPinnedHostKeys(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	hs := hosts.StartForTest(t, n, "smoke", 3)
	g.Expect(hs).To(HaveLen(3))

	seen := map[string]bool{}
	for _, h := range hs {
		out, _, err := h.Run(ctx, "hostname && ip -4 -o addr show dev eth0")
		g.Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		g.Expect(lines).To(HaveLen(2))
		g.Expect(lines[0]).To(Equal(h.Name))
		g.Expect(lines[1]).To(ContainSubstring(" " + h.Address.String() + "/24 "))
		g.Expect(n.Prefix.Contains(h.Address)).To(BeTrue())
		seen[h.Address.String()] = true
	}
	g.Expect(seen).To(HaveLen(3), "each host has its own address")

	// Host 0's client key with host 1's host key pinned: the handshake must fail on the host key.
	wrong := hs[0].ClientConfig()
	wrong.HostKeyCallback = ssh.FixedHostKey(hs[1].HostKey)
	_, err := ssh.Dial("tcp", hs[0].Endpoint(), wrong)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("host key mismatch"))

	// A key the host does not authorize is refused.
	other := hs[1].ClientConfig()
	other.HostKeyCallback = ssh.FixedHostKey(hs[0].HostKey)
	_, err = ssh.Dial("tcp", hs[0].Endpoint(), other)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("unable to authenticate"))

	// Hosts reach the bridge address, where a workload apiserver would listen.
	_, _, err = hs[2].Run(ctx, "ping -c1 -W2 "+n.Gateway.String()+" >/dev/null || busybox ping -c1 -W2 "+n.Gateway.String())
	g.Expect(err).NotTo(HaveOccurred())
}

// Closing the network removes every namespace, process and link it created.
func TestNetworkCloseRemovesEverything(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n, err := labnet.New(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = n.Close() })
	hs, err := hosts.Start(ctx, n, "gone", 1, hosts.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n.Close()).To(Succeed())
	g.Expect(labnet.Exists(hs[0].Namespace)).To(BeFalse())
	g.Expect(labnet.LinkExists(n.Bridge)).To(BeFalse())
	g.Expect(labnet.LinkExists(fmt.Sprintf("yv%dh1", n.Slot))).To(BeFalse())
	_, err = hs[0].Dial(ctx)
	g.Expect(err).To(HaveOccurred())
}

// Private directories: what one host writes there, no other host and not the machine can see; the
// machine's files in that place are hidden from the hosts.
func TestPrivateDirectoriesAreHostLocal(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	shared := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(shared, "machine-file"), []byte("machine"), 0o600)).To(Succeed())
	keyPEM, _, err := hosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := hosts.Start(ctx, n, "priv", 2, hosts.Options{ClientKeyPEM: keyPEM, PrivateDirs: []string{shared, hosts.HomeDir}})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = hs[0].Output(ctx, "echo zero > "+shared+"/marker")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := hs[0].Output(ctx, "cat "+shared+"/marker; ls -A "+shared)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("zero\nmarker\n"), "the machine's file is hidden, the host's own is there")
	out, err = hs[0].Output(ctx, "ls -A "+hosts.HomeDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeEmpty(), "the machine's dotfiles are hidden")
	out, err = hs[1].Output(ctx, "ls -A "+shared)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeEmpty())
	_, err = os.Stat(filepath.Join(shared, "marker"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the machine does not see the host's file")

	// A stopped host is unreachable.
	g.Expect(hs[1].Stop()).To(Succeed())
	_, err = hs[1].Dial(ctx)
	g.Expect(err).To(HaveOccurred())
}

// The kernel's shared state stays shared: with a private /run, every host still sees the machine's sysctl
// registry, and what an agent on one host records there, the machine and the other hosts see.
func TestKernelDirectoriesStaySharedUnderAPrivateRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := labnet.NewForTest(t)
	keyPEM, _, err := hosts.NewClientKey()
	g.Expect(err).NotTo(HaveOccurred())
	hs, err := hosts.Start(ctx, n, "kern", 2, hosts.Options{ClientKeyPEM: keyPEM, PrivateDirs: []string{"/run"}})
	g.Expect(err).NotTo(HaveOccurred())
	for _, d := range hosts.KernelDirs {
		marker := fmt.Sprintf("holder-kern-%d", os.Getpid())
		t.Cleanup(func() { _ = os.Remove(filepath.Join(d, marker)) })
		_, err = hs[0].Output(ctx, "touch "+filepath.Join(d, marker))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(filepath.Join(d, marker)).To(BeAnExistingFile(), "the machine sees what host 0 wrote in %s", d)
		out, err := hs[1].Output(ctx, "ls -A "+d)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring(marker), "host 1 sees it too")
		// The rest of /run stays private.
		out, err = hs[1].Output(ctx, "ls -A /run")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).NotTo(ContainSubstring("yonder-test"), "the machine's /run is hidden")
	}
}
