// Package machine implements `kubectl yonder machine manual-bootstrap`: a one-line command that joins a
// host to a Cluster's workload cluster without an infrastructure provider (the host runs it as root).
package machine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"

	"github.com/yonder-dev/yonder/bootstrap/manualjoin"
	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// NewCommand returns `machine` with its subcommands.
func NewCommand(o *cli.Options) *cobra.Command {
	cmd := &cobra.Command{Use: "machine", Short: "Join hosts to a Cluster by hand"}
	cmd.AddCommand(newManualBootstrapCommand(o))
	return cmd
}

// BootstrapOptions are the flags of `machine manual-bootstrap`.
type BootstrapOptions struct {
	NodeName          string
	Cluster           string
	TTL               time.Duration
	AgentURL          string
	AgentPath         string
	AgentSHA256       string
	KubernetesVersion string
	Site              string
	Labels            []string
	ProviderID        string
	RootfsImage       string
	Script            bool
}

func newManualBootstrapCommand(o *cli.Options) *cobra.Command {
	b := &BootstrapOptions{}
	cmd := &cobra.Command{
		Use:   "manual-bootstrap NAME --cluster CLUSTER --agent-url URL --agent-sha256 SHA",
		Short: "Print a one-line command that joins a host to the Cluster as Node NAME",
		Long: `Creates a bootstrap token in the Cluster's workload cluster (authentication only, extra group
system:bootstrappers:yonder:worker, expiring after --ttl) and prints one line of shell that writes the
yonder-agent installer (sha256-pinned) and its AgentConfig, then runs ` + "`yonder-agent bootstrap`" + `.
The line contains the token: treat it as a secret until it expires. Progress goes to stderr, the line to stdout.`,
		Example: `  kubectl yonder machine manual-bootstrap edge-7 --cluster edge \
      --agent-url https://example.org/yonder-agent --agent-sha256 0123… | ssh root@edge-7 sudo bash`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b.NodeName = args[0]
			return ManualBootstrap(cmd.Context(), o, b)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&b.Cluster, "cluster", "", "the CAPI Cluster whose workload cluster the host joins (required)")
	fs.DurationVar(&b.TTL, "ttl", 15*time.Minute, "lifetime of the bootstrap token (1m…24h)")
	fs.StringVar(&b.AgentURL, "agent-url", "", "URL the host downloads yonder-agent from")
	fs.StringVar(&b.AgentPath, "agent-path", "", "path of yonder-agent already on the host (offline bundle); instead of --agent-url")
	fs.StringVar(&b.AgentSHA256, "agent-sha256", "", "sha256 of yonder-agent (required)")
	fs.StringVar(&b.KubernetesVersion, "kubernetes-version", "", "kubelet version (default: the control plane's status.version)")
	fs.StringVar(&b.Site, "site", "", "network site of the node")
	fs.StringSliceVar(&b.Labels, "labels", nil, "node labels key=value[,key=value]")
	fs.StringVar(&b.ProviderID, "provider-id", "", "spec.providerID of the Node (default: none)")
	fs.StringVar(&b.RootfsImage, "rootfs-image", "", "OCI image of the node's root filesystem (default: the agent's)")
	fs.BoolVar(&b.Script, "script", false, "print the whole script instead of the one-liner")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

func labels(in []string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, l := range in {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", l)
		}
		out[k] = v
	}
	return out, nil
}

// ManualBootstrap creates the token and prints the join line.
func ManualBootstrap(ctx context.Context, o *cli.Options, b *BootstrapOptions) error {
	var errs []string
	if msgs := validation.IsDNS1123Subdomain(b.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("NAME %q is not a valid Node name: %s", b.NodeName, strings.Join(msgs, "; ")))
	}
	if b.Cluster == "" {
		errs = append(errs, "--cluster is required")
	}
	if (b.AgentURL == "") == (b.AgentPath == "") {
		errs = append(errs, "set exactly one of --agent-url and --agent-path")
	}
	if b.AgentSHA256 == "" {
		errs = append(errs, "--agent-sha256 is required (the host verifies the agent before running it)")
	}
	lbls, err := labels(b.Labels)
	if err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	req := manualjoin.Request{
		Config: agentv1.AgentConfig{
			NodeName: b.NodeName, ProviderID: b.ProviderID, KubernetesVersion: b.KubernetesVersion, Labels: lbls, Site: b.Site,
			Rootfs: agentv1.Rootfs{Image: b.RootfsImage}, GPU: agentv1.GPU{Mode: agentv1.GPUModeNone},
		},
		Agent: manualjoin.AgentSource{URL: b.AgentURL, Path: b.AgentPath, SHA256: b.AgentSHA256},
		TTL:   b.TTL,
	}
	if req.Config.KubernetesVersion == "" {
		req.Config.KubernetesVersion = "v0.0.0"
	}
	// Reject bad input (labels, sha, TTL, paths) before anything is contacted; the API server fields come
	// from the cluster below.
	if err := req.Validate(); err != nil {
		return err
	}

	ns, err := o.Ns()
	if err != nil {
		return err
	}
	c, err := o.Client()
	if err != nil {
		return err
	}
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.Cluster}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %s/%s does not exist (use -n for another namespace)", ns, b.Cluster)
		}
		return fmt.Errorf("failed to get Cluster %s/%s: %w", ns, b.Cluster, err)
	}
	wl, err := cli.WorkloadFor(ctx, c, ns, b.Cluster)
	if err != nil {
		return err
	}
	if len(wl.CACertificate) == 0 {
		return fmt.Errorf("the kubeconfig of Cluster %s/%s has no certificate-authority-data: joining nodes need the CA", ns, b.Cluster)
	}
	req.Cluster = ns + "/" + b.Cluster
	req.Config.APIServer = agentv1.APIServer{Endpoint: endpoint(cluster, wl), CACertificate: string(wl.CACertificate)}
	if b.KubernetesVersion == "" {
		if req.Config.KubernetesVersion, err = controlPlaneVersion(ctx, c, cluster); err != nil {
			return err
		}
	}
	res, err := manualjoin.Create(ctx, wl.Client, req, o.Now())
	if err != nil {
		return fmt.Errorf("failed to create the join for %s: %w", b.NodeName, err)
	}
	_, _ = fmt.Fprintf(o.ErrOut, "Created bootstrap token %s in the workload cluster of %s (expires %s, in %s).\n"+
		"Run the line below on the host as root, e.g. `… | ssh root@HOST sudo bash`. It contains the token.\n",
		res.TokenID, req.Cluster, res.Expires.Format(time.RFC3339), b.TTL)
	if b.Script {
		_, err = o.Out.Write(res.Script)
		return err
	}
	line, err := manualjoin.OneLiner(res.Script)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(o.Out, line)
	return err
}

// endpoint is the Cluster's control plane endpoint, else the kubeconfig's server.
func endpoint(cluster *clusterv1.Cluster, wl *cli.Workload) string {
	if ep := cluster.Spec.ControlPlaneEndpoint; ep.IsValid() {
		return "https://" + net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
	}
	if u, err := url.Parse(wl.Server); err == nil && u.Port() == "" {
		return "https://" + net.JoinHostPort(u.Hostname(), "443")
	}
	return wl.Server
}

func controlPlaneVersion(ctx context.Context, c client.Client, cluster *clusterv1.Cluster) (string, error) {
	if cluster.Spec.ControlPlaneRef.IsDefined() {
		cp, err := external.GetObjectFromContractVersionedRef(ctx, c, cluster.Spec.ControlPlaneRef, cluster.Namespace)
		if err != nil {
			return "", fmt.Errorf("failed to get the control plane of Cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
		}
		if v, _, _ := unstructured.NestedString(cp.Object, "status", "version"); v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("the control plane of Cluster %s/%s reports no version: pass --kubernetes-version", cluster.Namespace, cluster.Name)
}
