package cli

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/kubeconfig"
)

// Workload is a connection to a Cluster's workload cluster, made from its "<cluster>-kubeconfig" Secret
// (the one the control plane provider writes).
type Workload struct {
	Client client.Client
	Config *rest.Config
	// CACertificate is the API server CA of the kubeconfig's current context (what joining nodes pin).
	CACertificate []byte
	// Server is the API server URL of the kubeconfig's current context.
	Server string
}

// WorkloadFor connects to the workload cluster of Cluster namespace/name.
func WorkloadFor(ctx context.Context, mgmt client.Reader, namespace, name string) (*Workload, error) {
	data, err := kubeconfig.FromSecret(ctx, mgmt, client.ObjectKey{Namespace: namespace, Name: name})
	if err != nil {
		return nil, fmt.Errorf("failed to read the kubeconfig Secret %s/%s-kubeconfig of Cluster %s (is the control plane initialized?): %w", namespace, name, name, err)
	}
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the kubeconfig of Cluster %s/%s: %w", namespace, name, err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to use the kubeconfig of Cluster %s/%s: %w", namespace, name, err)
	}
	cfg.UserAgent = "kubectl-yonder"
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to create a client for the workload cluster of %s/%s: %w", namespace, name, err)
	}
	w := &Workload{Client: c, Config: cfg, Server: cfg.Host}
	if cl := currentCluster(raw); cl != nil {
		w.CACertificate = cl.CertificateAuthorityData
	}
	return w, nil
}

func currentCluster(c *clientcmdapi.Config) *clientcmdapi.Cluster {
	if kctx, ok := c.Contexts[c.CurrentContext]; ok {
		return c.Clusters[kctx.Cluster]
	}
	return nil
}
