package kubeletserving

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func request(t *testing.T, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCheck(t *testing.T) {
	machine := &clusterv1.Machine{}
	machine.Name = "m"
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: "n1"}
	machine.Status.Addresses = clusterv1.MachineAddresses{
		{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"},
		{Type: clusterv1.MachineExternalIP, Address: "2001:db8::5"},
		{Type: clusterv1.MachineHostName, Address: "N1.lab"},
	}
	machine.Status.Addresses = append(machine.Status.Addresses,
		// Forged: what a compromised host could have had recorded as its name or address.
		clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: "kubernetes.default.svc"},
		clusterv1.MachineAddress{Type: clusterv1.MachineInternalDNS, Address: "api.kube-system.svc.cluster.local"},
		clusterv1.MachineAddress{Type: clusterv1.MachineInternalDNS, Address: "anything.corp.internal"},
		clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: "10.96.0.1"},
		clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: "127.0.0.1"})
	cluster := &clusterv1.Cluster{}
	cluster.Spec.ClusterNetwork.Services.CIDRBlocks = []string{"10.96.0.0/12"}
	cluster.Spec.ClusterNetwork.ServiceDomain = "corp.internal"
	subject := pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}
	good := func() *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			Username:   "system:node:n1",
			Groups:     []string{"system:nodes", "system:authenticated"},
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth},
			Request: request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"n1.lab"},
				IPAddresses: []net.IP{net.ParseIP("10.0.0.5"), net.ParseIP("2001:db8::5")}}),
		}}
	}
	u, _ := url.Parse("spiffe://x")
	for _, tc := range []struct {
		name   string
		mutate func(*certificatesv1.CertificateSigningRequest)
		want   string
	}{
		{"matching", func(*certificatesv1.CertificateSigningRequest) {}, ""},
		{"other requester", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "system:node:n2" }, "not by node n1"},
		{"not in nodes group", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Groups = []string{"system:authenticated"} }, "not in group"},
		{"client auth usage", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageClientAuth)
		}, `usage "client auth"`},
		{"no server auth", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
		}, "lack"},
		{"wrong CN", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:n2", Organization: []string{"system:nodes"}}, DNSNames: []string{"n1.lab"}})
		}, "common name"},
		{"wrong O", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:masters"}}, DNSNames: []string{"n1.lab"}})
		}, "organization"},
		{"foreign IP", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, IPAddresses: []net.IP{net.ParseIP("10.0.0.6")}})
		}, "IP address 10.0.0.6"},
		{"foreign DNS", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"kubernetes.default"}})
		}, `DNS name "kubernetes.default"`},
		{"node name", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"n1"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.5")}})
		}, ""},
		{"another node's name", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"n2"}})
		}, `DNS name "n2" is not an address of Machine m`},
		{"API server service name", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"n1.lab", "kubernetes.default.svc"}})
		}, `DNS name "kubernetes.default.svc" is a cluster service name`},
		{"bare kubernetes", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"Kubernetes."}})
		}, `DNS name "Kubernetes." is a cluster service name`},
		{"service DNS name", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"api.kube-system.svc.cluster.local"}})
		}, `DNS name "api.kube-system.svc.cluster.local" is a cluster service name`},
		{"name under the service domain", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"anything.corp.internal"}})
		}, `DNS name "anything.corp.internal" is a cluster service name`},
		{"wildcard", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, DNSNames: []string{"*.lab"}})
		}, `DNS name "*.lab" is a cluster service name`},
		{"service IP", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, IPAddresses: []net.IP{net.ParseIP("10.96.0.1")}})
		}, "IP address 10.96.0.1 is in the cluster's service CIDR 10.96.0.0/12"},
		{"loopback", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}})
		}, "IP address 127.0.0.1 is loopback or unspecified"},
		{"URI SAN", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject, URIs: []*url.URL{u}})
		}, "URI"},
		{"no SANs", func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, &x509.CertificateRequest{Subject: subject})
		}, "no DNS name"},
		{"garbage", func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = []byte("nope") }, "not a PEM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			csr := good()
			tc.mutate(csr)
			err := Check(csr, machine, cluster)
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestIsPendingServing(t *testing.T) {
	g := NewWithT(t)
	csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: certificatesv1.KubeletServingSignerName}}
	g.Expect(IsPendingServing(csr)).To(BeTrue())
	csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied}}
	g.Expect(IsPendingServing(csr)).To(BeFalse())
	csr = &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName}}
	g.Expect(IsPendingServing(csr)).To(BeFalse())
}

// FuzzCheck: whatever a kubelet puts into its serving CSR (names, addresses, or bytes that are no CSR at
// all), Check never panics, and what it approves names only the node itself or the Machine's recorded
// addresses, and never a cluster service name or address.
func FuzzCheck(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	machine := &clusterv1.Machine{}
	machine.Name = "m"
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: "n1"}
	machine.Status.Addresses = clusterv1.MachineAddresses{
		{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"},
		{Type: clusterv1.MachineInternalIP, Address: "10.96.0.10"},
		{Type: clusterv1.MachineHostName, Address: "n1.lab"},
		{Type: clusterv1.MachineInternalDNS, Address: "kubernetes.default.svc"},
	}
	cluster := &clusterv1.Cluster{}
	cluster.Spec.ClusterNetwork.Services.CIDRBlocks = []string{"10.96.0.0/12"}
	allowedDNS := map[string]bool{"n1": true, "n1.lab": true}
	allowedIP := map[string]bool{"10.0.0.5": true}
	for _, seed := range [][3]string{{"n1.lab", "10.0.0.5", ""}, {"kubernetes.default.svc,n1", "10.96.0.10", ""}, {"N1.LAB.", "::1", ""}, {"", "", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"}} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, dns, ips, raw string) {
		csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			Username: "system:node:n1", Groups: []string{"system:nodes"}, SignerName: certificatesv1.KubeletServingSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}, Request: []byte(raw)}}
		if raw == "" {
			tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}}
			if dns != "" {
				tmpl.DNSNames = strings.Split(dns, ",")
			}
			for _, s := range strings.Split(ips, ",") {
				if ip := net.ParseIP(s); ip != nil {
					tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
				}
			}
			der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
			if err != nil {
				return
			}
			csr.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
		}
		if Check(csr, machine, cluster) != nil {
			return
		}
		block, _ := pem.Decode(csr.Spec.Request)
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			t.Fatalf("approved a request that does not parse: %v", err)
		}
		for _, d := range req.DNSNames {
			if !allowedDNS[strings.ToLower(d)] {
				t.Fatalf("approved DNS name %q", d)
			}
		}
		for _, ip := range req.IPAddresses {
			if !allowedIP[ip.String()] {
				t.Fatalf("approved IP address %s", ip)
			}
		}
	})
}
