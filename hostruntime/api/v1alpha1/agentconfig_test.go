package v1alpha1_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/gomega"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
)

func testCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func valid(t testing.TB) *agentv1.AgentConfig {
	t.Helper()
	return &agentv1.AgentConfig{
		NodeName:          "worker-0",
		KubernetesVersion: "v1.36.3",
		APIServer:         agentv1.APIServer{Endpoint: "https://10.0.0.1:6443", CACertificate: testCA(t)},
		BootstrapToken:    "abcdef.0123456789abcdef",
		Labels:            map[string]string{"yonder.dev/site": "edge"},
		Taints:            []agentv1.Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}},
		KubeletExtraArgs:  []agentv1.Arg{{Name: "max-pods", Value: "50"}},
		Site:              "edge",
		Rootfs:            agentv1.Rootfs{Image: "registry.example/rootfs@sha256:" + strings.Repeat("a", 64)},
		Artifacts:         []agentv1.Artifact{{Name: "kubelet", URL: "http://10.0.0.1/kubelet", SHA256: strings.Repeat("b", 64)}},
		GPU:               agentv1.GPU{Mode: agentv1.GPUModeAuto},
		Files:             []agentv1.File{{Path: "/etc/motd", Content: "hi", Permissions: "0644", Owner: "root:root"}},
		PreCommands:       []string{"echo pre"},
		PostCommands:      []string{"echo post"},
	}
}

func TestEncodeDecodeRoundTrips(t *testing.T) {
	g := NewWithT(t)
	in := valid(t)
	data, err := agentv1.Encode(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring("apiVersion: hostruntime.yonder.dev/v1alpha1"))
	g.Expect(string(data)).To(ContainSubstring("kind: AgentConfig"))
	out, err := agentv1.Decode(data)
	g.Expect(err).NotTo(HaveOccurred())
	in.APIVersion, in.Kind = agentv1.APIVersion, agentv1.Kind
	g.Expect(out).To(Equal(in))
}

func TestDecodeIsStrictAndReportsFieldPaths(t *testing.T) {
	good, err := agentv1.Encode(valid(t))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, tc := range []struct {
		name   string
		mutate func(string) string
		want   []string
	}{
		{"unknown field", func(s string) string { return s + "surprise: true\n" }, []string{`unknown field "surprise"`}},
		{"wrong kind", func(s string) string { return strings.Replace(s, "kind: AgentConfig", "kind: Other", 1) }, []string{"kind: Unsupported value"}},
		{"wrong apiVersion", func(s string) string { return strings.Replace(s, "hostruntime.yonder.dev/v1alpha1", "v1", 1) }, []string{"apiVersion: Unsupported value"}},
		{"bad token is redacted", func(s string) string {
			return strings.Replace(s, "abcdef.0123456789abcdef", "ABCDEF.secretsecretsecret", 1)
		}, []string{"bootstrapToken: Invalid value", "<redacted>"}},
		{"bad sha", func(s string) string { return strings.Replace(s, strings.Repeat("b", 64), "xyz", 1) }, []string{"artifacts[0].sha256: Invalid value"}},
		{"bad effect", func(s string) string { return strings.Replace(s, "effect: NoSchedule", "effect: Sometimes", 1) }, []string{"taints[0].effect: Unsupported value"}},
		{"relative file", func(s string) string { return strings.Replace(s, "path: /etc/motd", "path: etc/motd", 1) }, []string{"files[0].path: Invalid value"}},
		{"http endpoint", func(s string) string { return strings.Replace(s, "https://10.0.0.1:6443", "http://10.0.0.1:6443", 1) }, []string{"apiServer.endpoint: Invalid value"}},
		{"gpu mode", func(s string) string { return strings.Replace(s, "mode: Auto", "mode: Intel", 1) }, []string{"gpu.mode: Unsupported value"}},
		// Unquoted scalars that YAML 1.1 reads as numbers or booleans are refused, not turned into other
		// strings (0644 would have become the mode "420", on the label value "true").
		{"unquoted octal mode", func(s string) string { return strings.Replace(s, `permissions: "0644"`, "permissions: 0644", 1) }, []string{"cannot unmarshal number", "files.permissions"}},
		{"unquoted number", func(s string) string { return strings.Replace(s, `value: "50"`, "value: 50", 1) }, []string{"cannot unmarshal number", "kubeletExtraArgs.value"}},
		{"unquoted boolean", func(s string) string { return strings.Replace(s, "yonder.dev/site: edge", "yonder.dev/site: on", 1) }, []string{"cannot unmarshal bool", "labels"}},
		{"duplicate field", func(s string) string { return s + "nodeName: worker-1\n" }, []string{`key "nodeName" already set`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			bad := tc.mutate(string(good))
			g.Expect(bad).NotTo(Equal(string(good)), "the case changes the config")
			_, err := agentv1.Decode([]byte(bad))
			g.Expect(err).To(HaveOccurred())
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
			g.Expect(err.Error()).NotTo(ContainSubstring("secretsecretsecret"))
		})
	}
}

func FuzzDecode(f *testing.F) {
	good, err := agentv1.Encode(valid(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(strings.Replace(string(good), `permissions: "0644"`, "permissions: 0644", 1)))
	f.Add([]byte("apiVersion: hostruntime.yonder.dev/v1alpha1\nkind: AgentConfig\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := agentv1.Decode(data)
		if err != nil {
			return
		}
		// Whatever decodes must encode and decode to the same config: the agent on the host acts on
		// what the controller meant, no field lost or changed on the way. An empty list or map and an
		// absent one mean the same (omitempty drops the empty ones).
		again, err := agentv1.Encode(c)
		if err != nil {
			t.Fatalf("decoded config does not encode: %v", err)
		}
		c2, err := agentv1.Decode(again)
		if err != nil {
			t.Fatalf("re-encoded config does not decode: %v\n%s", err, again)
		}
		if diff := cmp.Diff(c, c2, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("the round trip changed the config (-decoded +re-decoded):\n%s\nencoded:\n%s", diff, again)
		}
		// And the encoding is stable: encoding the re-decoded config gives the same bytes.
		third, err := agentv1.Encode(c2)
		if err != nil {
			t.Fatalf("re-decoded config does not encode: %v", err)
		}
		if string(third) != string(again) {
			t.Fatalf("encoding is not stable:\n%s\n---\n%s", again, third)
		}
	})
}

// A node image must be pinned by digest and sit in the registry block's host; the registry's password is
// never echoed.
func TestNodeImageAndRegistryValidation(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("c", 64)
	for _, tc := range []struct {
		name  string
		image string
		reg   *agentv1.Registry
		want  []string
	}{
		{"pinned in its registry", "reg.example:5000/yonder/yonder-node" + digest, &agentv1.Registry{Host: "reg.example:5000", Username: "u", Password: "p", MirrorOf: []string{"ghcr.io"}}, nil},
		{"tag only", "reg.example/yonder/yonder-node:v1.36.3", nil, []string{"rootfs.image: Invalid value", "pinned by digest"}},
		{"other registry", "other.example/yonder/yonder-node" + digest, &agentv1.Registry{Host: "reg.example"}, []string{"must be in registry.host reg.example"}},
		{"half credentials", "", &agentv1.Registry{Host: "reg.example", Password: "hunter2-secret"}, []string{"registry.username: Invalid value"}},
		{"bad host and mirror", "", &agentv1.Registry{Host: "https://reg", MirrorOf: []string{"Bad Host"}}, []string{"registry.host: Invalid value", "registry.mirrorOf[0]: Invalid value"}},
		{"bad CA", "", &agentv1.Registry{Host: "reg.example", CACertificate: "not pem"}, []string{"registry.caCertificate: Invalid value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := valid(t)
			c.APIVersion, c.Kind = agentv1.APIVersion, agentv1.Kind
			c.Rootfs.Archive, c.Rootfs.Image, c.Registry = nil, tc.image, tc.reg
			errs := c.Validate()
			if tc.want == nil {
				g.Expect(errs).To(BeEmpty())
				return
			}
			g.Expect(errs.ToAggregate()).To(HaveOccurred())
			for _, w := range tc.want {
				g.Expect(errs.ToAggregate().Error()).To(ContainSubstring(w))
			}
			g.Expect(errs.ToAggregate().Error()).NotTo(ContainSubstring("hunter2-secret"))
		})
	}
}
