package yondercontrolplane

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

func TestEndpointFromServer(t *testing.T) {
	for server, want := range map[string]clusterv1.APIEndpoint{
		"https://10.0.0.1:6443":        {Host: "10.0.0.1", Port: 6443},
		"https://api.example.com":      {Host: "api.example.com", Port: 443},
		"https://[2001:db8::1]:8443":   {Host: "2001:db8::1", Port: 8443},
		"https://[2001:db8::1]":        {Host: "2001:db8::1", Port: 443},
		"https://api.example.com/path": {Host: "api.example.com", Port: 443},
	} {
		g := NewWithT(t)
		got, err := endpointFromServer(server)
		g.Expect(err).NotTo(HaveOccurred(), server)
		g.Expect(got).To(Equal(want), server)
	}
}

// Only the current context survives normalization, renamed the way CAPI names things.
func TestNormalizeKeepsOnlyTheCurrentContext(t *testing.T) {
	g := NewWithT(t)
	in := clientcmdapi.NewConfig()
	in.Clusters["prod"] = &clientcmdapi.Cluster{Server: "https://prod:6443", CertificateAuthorityData: []byte("ca")}
	in.Clusters["other"] = &clientcmdapi.Cluster{Server: "https://other:6443"}
	in.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	in.AuthInfos["someone"] = &clientcmdapi.AuthInfo{Token: "secret-of-another-cluster"}
	in.Contexts["a"] = &clientcmdapi.Context{Cluster: "prod", AuthInfo: "admin"}
	in.Contexts["b"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "someone"}
	in.CurrentContext = "a"
	data, err := clientcmd.Write(*in)
	g.Expect(err).NotTo(HaveOccurred())
	out, cfg, err := normalizeKubeconfig("edge", data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).NotTo(ContainSubstring("secret-of-another-cluster"))
	g.Expect(cfg.Clusters).To(HaveLen(1))
	g.Expect(cfg.Clusters["edge"].Server).To(Equal("https://prod:6443"))
	g.Expect(cfg.AuthInfos["edge-admin"].Token).To(Equal("t"))
	g.Expect(cfg.CurrentContext).To(Equal("edge-admin@edge"))

	in.CurrentContext = "missing"
	data, _ = clientcmd.Write(*in)
	_, _, err = normalizeKubeconfig("edge", data)
	g.Expect(err).To(MatchError(ContainSubstring("no usable current-context")))
	in.CurrentContext = "a"
	in.Clusters["prod"].Server = "http://prod:8080"
	data, _ = clientcmd.Write(*in)
	_, _, err = normalizeKubeconfig("edge", data)
	var kerr *kubeconfigError
	g.Expect(err).To(BeAssignableToTypeOf(kerr))
	g.Expect(err.(*kubeconfigError).reason).To(Equal(controlplanev1.YonderControlPlaneKubeconfigInvalidReason))
}
