// Package machine implements `kubectl yonder machine manual-bootstrap`: a one-line command that joins a
// host to a Cluster's workload cluster without an infrastructure provider (the host runs it as root).
package machine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
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
	// ImageRepository is where the node image of the version and the agent's blob come from (default: the
	// installed bootstrap provider's --image-repository).
	ImageRepository string
	// RegistryCAFile is a PEM file with the CA of the repository's registry (default: the system roots).
	RegistryCAFile string
	// MirrorOf are upstream registries the node pulls through the repository's registry.
	MirrorOf []string
	Script   bool
}

func newManualBootstrapCommand(o *cli.Options) *cobra.Command {
	b := &BootstrapOptions{}
	cmd := &cobra.Command{
		Use:   "manual-bootstrap NAME --cluster-name CLUSTER --agent-url URL --agent-sha256 SHA",
		Short: "Print a one-line command that joins a host to the Cluster as Node NAME",
		Long: `Creates a bootstrap token in the Cluster's workload cluster (authentication only, extra group
system:bootstrappers:yonder:worker, expiring after --ttl) and prints one line of shell that writes the
yonder-agent installer (sha256-pinned) and its AgentConfig, then runs ` + "`yonder-agent bootstrap`" + `.
The line contains the token: treat it as a secret until it expires. Progress goes to stderr, the line to stdout.

Where the host's software comes from is what a Machine of the bootstrap provider gets: the node image of the
Kubernetes version in --image-repository (resolved to its digest now) and yonder-agent's blob (--agent-sha256)
in the same registry. Both default to the installed bootstrap provider's --image-repository and
--agent-sha256 (its Deployment in the management cluster), so nothing has to be hosted by hand;
--agent-url or --agent-path and --rootfs-image override them.`,
		Example: `  kubectl yonder machine manual-bootstrap edge-7 --cluster-name edge | ssh root@edge-7 sudo bash
  kubectl yonder machine manual-bootstrap edge-8 --cluster-name edge --image-repository registry.example:5000/yonder-dev \
      --registry-ca-file registry-ca.crt --registry-mirror-of ghcr.io | ssh root@edge-8 sudo bash
  kubectl yonder machine manual-bootstrap edge-9 --cluster-name edge \
      --agent-url https://example.org/yonder-agent --agent-sha256 0123… --rootfs-image example.org/node@sha256:… | ssh root@edge-9 sudo bash`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b.NodeName = args[0]
			return ManualBootstrap(cmd.Context(), o, b)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&b.Cluster, "cluster-name", "", "the CAPI Cluster whose workload cluster the host joins (required)")
	fs.DurationVar(&b.TTL, "ttl", 15*time.Minute, "lifetime of the bootstrap token (1m…24h)")
	fs.StringVar(&b.AgentURL, "agent-url", "", "URL the host downloads yonder-agent from (default: its blob in --image-repository)")
	fs.StringVar(&b.AgentPath, "agent-path", "", "path of yonder-agent already on the host (offline bundle); instead of --agent-url")
	fs.StringVar(&b.AgentSHA256, "agent-sha256", "", "sha256 of yonder-agent (default: the installed bootstrap provider's)")
	fs.StringVar(&b.KubernetesVersion, "kubernetes-version", "", "kubelet version (default: the control plane's status.version)")
	fs.StringVar(&b.Site, "site", "", "network site of the node")
	fs.StringSliceVar(&b.Labels, "labels", nil, "node labels key=value[,key=value]")
	fs.StringVar(&b.ProviderID, "provider-id", "", "spec.providerID of the Node (default: none)")
	fs.StringVar(&b.RootfsImage, "rootfs-image", "", "OCI image of the node's root filesystem (default: <image repository>/yonder-node:<version>)")
	fs.StringVar(&b.ImageRepository, "image-repository", "", "where the node image and yonder-agent come from (default: the installed bootstrap provider's)")
	fs.StringVar(&b.RegistryCAFile, "registry-ca-file", "", "PEM file with the CA of the image repository's registry (default: the system roots)")
	fs.StringSliceVar(&b.MirrorOf, "registry-mirror-of", nil, "upstream registries the node pulls through the image repository's registry, e.g. ghcr.io")
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
	req, err := b.request()
	if err != nil {
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
	repo, reg, err := b.agentSource(ctx, c, req)
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
	if err := rootfs(ctx, req, repo, reg); err != nil {
		return err
	}
	res, err := manualjoin.Create(ctx, wl.Client, *req, o.Now())
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

// request checks the flags and builds the join request, before anything is contacted. An agent source
// given by flags is validated now; one from the image repository once its defaults are known.
func (b *BootstrapOptions) request() (*manualjoin.Request, error) {
	var errs []string
	if msgs := validation.IsDNS1123Subdomain(b.NodeName); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("NAME %q is not a valid Node name: %s", b.NodeName, strings.Join(msgs, "; ")))
	}
	if b.Cluster == "" {
		errs = append(errs, "--cluster-name is required")
	}
	if b.AgentURL != "" && b.AgentPath != "" {
		errs = append(errs, "set at most one of --agent-url and --agent-path")
	}
	lbls, err := labels(b.Labels)
	if err != nil {
		errs = append(errs, err.Error())
	}
	var caPEM []byte
	if b.RegistryCAFile != "" {
		if caPEM, err = os.ReadFile(b.RegistryCAFile); err != nil {
			errs = append(errs, fmt.Sprintf("--registry-ca-file: %v", err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	req := &manualjoin.Request{
		Config: agentv1.AgentConfig{
			NodeName: b.NodeName, ProviderID: b.ProviderID, KubernetesVersion: b.KubernetesVersion, Labels: lbls, Site: b.Site,
			Rootfs: agentv1.Rootfs{Image: b.RootfsImage}, GPU: agentv1.GPU{Mode: agentv1.GPUModeNone},
		},
		Agent: manualjoin.AgentSource{URL: b.AgentURL, Path: b.AgentPath, SHA256: b.AgentSHA256, CACertificate: string(caPEM)},
		TTL:   b.TTL,
	}
	if req.Config.KubernetesVersion == "" {
		req.Config.KubernetesVersion = "v0.0.0"
	}
	check := *req
	if b.AgentURL == "" && b.AgentPath == "" {
		// The agent comes from the image repository: a placeholder source lets everything else be checked now.
		check.Agent.URL = "https://registry.invalid/v2/yonder-agent"
		if check.Agent.SHA256 == "" {
			check.Agent.SHA256 = strings.Repeat("0", 64)
		}
	}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// agentSource fills in where the host gets yonder-agent: the flags, else its blob in the image repository
// (the flag's, else the installed bootstrap provider's), as a Machine of that provider gets it. It returns
// the repository and its registry (empty and nil without a repository).
func (b *BootstrapOptions) agentSource(ctx context.Context, c client.Reader, req *manualjoin.Request) (string, *agentv1.Registry, error) {
	repo, sha := b.ImageRepository, b.AgentSHA256
	if repo == "" || sha == "" {
		d, err := providerDefaults(ctx, c)
		if err != nil {
			return "", nil, err
		}
		if repo == "" {
			repo = d.imageRepository
		}
		if sha == "" {
			sha = d.agentSHA256
		}
	}
	fromRepo := req.Agent.URL == "" && req.Agent.Path == ""
	if fromRepo && (repo == "" || sha == "") {
		return "", nil, errors.New("no yonder-agent source: pass --agent-url (or --agent-path) with --agent-sha256, or --image-repository " +
			"with --agent-sha256 (both default to the installed bootstrap provider's, and none was found)")
	}
	if req.Agent.SHA256 == "" {
		req.Agent.SHA256 = sha
	}
	if repo == "" {
		return "", nil, nil
	}
	reg, err := manualjoin.Registry(repo, []byte(req.Agent.CACertificate), b.MirrorOf)
	if err != nil {
		return "", nil, err
	}
	if fromRepo {
		if req.Agent.URL, err = manualjoin.AgentURL(repo, req.Agent.SHA256); err != nil {
			return "", nil, err
		}
	}
	return repo, reg, nil
}

// rootfs sets the node's root filesystem: --rootfs-image, else the node image of its Kubernetes version in
// the repository, resolved to its digest now. The registry settings go along where the image is in it.
func rootfs(ctx context.Context, req *manualjoin.Request, repo string, reg *agentv1.Registry) error {
	if reg == nil {
		return nil
	}
	if req.Config.Rootfs.Image == "" {
		ref, err := manualjoin.NodeImage(ctx, repo, req.Config.KubernetesVersion, reg)
		if err != nil {
			return err
		}
		req.Config.Rootfs.Image = ref
	}
	if strings.HasPrefix(req.Config.Rootfs.Image, reg.Host+"/") {
		req.Config.Registry = reg
	}
	return nil
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

// bootstrapDefaults are the installed bootstrap provider's image repository and agent.
type bootstrapDefaults struct{ imageRepository, agentSHA256 string }

// bootstrapProvider is the clusterctl provider label of the bootstrap provider's objects.
const bootstrapProvider = "bootstrap-yonder"

// providerDefaults reads --image-repository and --agent-sha256 from the bootstrap provider's Deployment
// (what clusterctl init installed). None installed, or none readable with the user's rights, gives none.
func providerDefaults(ctx context.Context, c client.Reader) (bootstrapDefaults, error) {
	deps := &appsv1.DeploymentList{}
	if err := c.List(ctx, deps, client.MatchingLabels{clusterv1.ProviderNameLabel: bootstrapProvider}); err != nil {
		if apierrors.IsForbidden(err) {
			return bootstrapDefaults{}, nil
		}
		return bootstrapDefaults{}, fmt.Errorf("failed to read the bootstrap provider's Deployment: %w", err)
	}
	var d bootstrapDefaults
	for _, dep := range deps.Items {
		for _, ctr := range dep.Spec.Template.Spec.Containers {
			if ctr.Name != "manager" {
				continue
			}
			args := append(append([]string{}, ctr.Command...), ctr.Args...)
			d.imageRepository = flagValue(args, "--image-repository")
			d.agentSHA256 = flagValue(args, "--agent-sha256")
		}
	}
	return d, nil
}

// flagValue is the value of flag in args, written as --flag=value or as two arguments.
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
		if a == flag && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			return args[i+1]
		}
	}
	return ""
}
