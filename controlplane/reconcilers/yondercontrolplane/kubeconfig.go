package yondercontrolplane

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
)

// kubeconfigError is a kubeconfig problem an operator has to fix; reason is a KubeconfigValid reason.
type kubeconfigError struct {
	reason  string
	message string
}

func (e *kubeconfigError) Error() string { return e.message }

// normalizeKubeconfig validates a user's admin kubeconfig and rewrites it the way CAPI writes
// "<cluster>-kubeconfig": one cluster named after the Cluster, one user "<cluster>-admin", one context
// "<cluster>-admin@<cluster>". Only the current context is kept, so a kubeconfig with many clusters
// cannot leak the others into the management cluster. Credentials must be inline: exec plugins, auth
// providers and file references cannot work inside a controller.
func normalizeKubeconfig(clusterName string, data []byte) ([]byte, *clientcmdapi.Config, error) {
	in, err := clientcmd.Load(data)
	if err != nil {
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The Secret does not hold a kubeconfig: %v", err)}
	}
	ctxName := in.CurrentContext
	if ctxName == "" && len(in.Contexts) == 1 {
		for name := range in.Contexts {
			ctxName = name
		}
	}
	kctx, ok := in.Contexts[ctxName]
	if !ok || kctx == nil {
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The kubeconfig has no usable current-context (%q); set current-context to the admin context of the existing cluster", ctxName)}
	}
	cl, ok := in.Clusters[kctx.Cluster]
	if !ok || cl == nil || cl.Server == "" {
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The kubeconfig's context %q names cluster %q, which is missing or has no server", ctxName, kctx.Cluster)}
	}
	u, err := url.Parse(cl.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The kubeconfig's server %q is not an https:// URL", cl.Server)}
	}
	if _, err := endpointFromServer(cl.Server); err != nil {
		// Refused here, with a condition the operator sees, rather than when the endpoint is derived.
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The kubeconfig's server %q has no valid port (1-65535)", cl.Server)}
	}
	user, ok := in.AuthInfos[kctx.AuthInfo]
	if !ok || user == nil {
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("The kubeconfig's context %q names user %q, which is missing", ctxName, kctx.AuthInfo)}
	}
	switch {
	case user.Exec != nil:
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigUnsupportedAuthReason, fmt.Sprintf("User %q authenticates with an exec plugin (%s), which cannot run in the management cluster; use a client certificate or a service account token", kctx.AuthInfo, user.Exec.Command)}
	case user.AuthProvider != nil:
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigUnsupportedAuthReason, fmt.Sprintf("User %q authenticates with auth provider %q, which cannot run in the management cluster; use a client certificate or a service account token", kctx.AuthInfo, user.AuthProvider.Name)}
	case user.ClientCertificate != "" || user.ClientKey != "" || user.TokenFile != "" || cl.CertificateAuthority != "":
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigUnsupportedAuthReason, "The kubeconfig refers to files on disk; embed them (kubectl config view --raw --flatten --minify)"}
	case len(user.ClientCertificateData) == 0 && user.Token == "" && user.Username == "":
		return nil, nil, &kubeconfigError{controlplanev1.YonderControlPlaneKubeconfigInvalidReason, fmt.Sprintf("User %q has no credentials: add client-certificate-data/client-key-data or a token", kctx.AuthInfo)}
	}

	userName := clusterName + "-admin"
	out := clientcmdapi.NewConfig()
	out.Clusters[clusterName] = &clientcmdapi.Cluster{
		Server:                   cl.Server,
		TLSServerName:            cl.TLSServerName,
		CertificateAuthorityData: cl.CertificateAuthorityData,
		InsecureSkipTLSVerify:    cl.InsecureSkipTLSVerify,
		ProxyURL:                 cl.ProxyURL,
	}
	out.AuthInfos[userName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: user.ClientCertificateData,
		ClientKeyData:         user.ClientKeyData,
		Token:                 user.Token,
		Username:              user.Username,
		Password:              user.Password,
		Impersonate:           user.Impersonate,
		ImpersonateGroups:     user.ImpersonateGroups,
	}
	name := userName + "@" + clusterName
	out.Contexts[name] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: userName, Namespace: kctx.Namespace}
	out.CurrentContext = name
	b, err := clientcmd.Write(*out)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to serialize kubeconfig: %w", err)
	}
	return b, out, nil
}

// endpointFromServer turns a kubeconfig server URL into a CAPI APIEndpoint (port 443 when absent).
func endpointFromServer(server string) (clusterv1.APIEndpoint, error) {
	u, err := url.Parse(server)
	if err != nil {
		return clusterv1.APIEndpoint{}, err
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, portStr = u.Hostname(), "443"
	}
	port, err := strconv.ParseInt(portStr, 10, 32)
	if err != nil || port <= 0 || port > 65535 {
		return clusterv1.APIEndpoint{}, fmt.Errorf("invalid port in %q", server)
	}
	return clusterv1.APIEndpoint{Host: host, Port: int32(port)}, nil
}
