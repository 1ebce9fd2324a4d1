// Package site implements `kubectl yonder site init`: installing Yonder's network add-on (CRDs, RBAC,
// yonder-net-controller, its webhook) into a workload cluster. The manifests are the rendering of
// network/config/default, embedded at build time; `make generate` refreshes the copy and `make verify-gen`
// fails when it is stale.
package site

import (
	"bytes"
	"context"
	_ "embed" // the network add-on's manifests
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// Manifests is `kustomize build network/config/default`.
//
//go:embed manifests/yonder-network.yaml
var Manifests []byte

// FieldOwner is the server-side apply field manager of everything site init applies.
const FieldOwner = "kubectl-yonder"

// NewCommand returns `site` with its subcommands.
func NewCommand(o *cli.Options) *cobra.Command {
	cmd := &cobra.Command{Use: "site", Short: "Install the network add-on (sites, tunnels) into a workload cluster"}
	cmd.AddCommand(newInitCommand(o))
	return cmd
}

// InitOptions are the flags of `site init`.
type InitOptions struct {
	// Cluster, when set, is a CAPI Cluster of the management cluster whose workload cluster gets the
	// add-on (through its <cluster>-kubeconfig Secret); otherwise the kubeconfig's cluster does.
	Cluster string
	// DryRun prints the manifests instead of applying them.
	DryRun bool
	// Timeout bounds the wait for the CRDs to be established.
	Timeout time.Duration
}

func newInitCommand(o *cli.Options) *cobra.Command {
	i := &InitOptions{}
	cmd := &cobra.Command{
		Use:   "init [--cluster-name NAME]",
		Short: "Apply the network add-on's CRDs, RBAC, controller and webhook (server-side apply, idempotent)",
		Example: `  kubectl yonder site init --cluster-name edge            # a Cluster of the management cluster
  kubectl yonder site init --kubeconfig workload.kubeconfig   # the kubeconfig's cluster itself
  kubectl yonder site init --dry-run > yonder-network.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return Init(cmd.Context(), o, i) },
	}
	cmd.Flags().StringVar(&i.Cluster, "cluster-name", "", "CAPI Cluster (in -n) whose workload cluster gets the add-on; default: the kubeconfig's cluster")
	cmd.Flags().BoolVar(&i.DryRun, "dry-run", false, "print the manifests instead of applying them")
	cmd.Flags().DurationVar(&i.Timeout, "timeout", 2*time.Minute, "how long to wait for the CRDs to be established")
	return cmd
}

// Objects decodes the embedded manifests.
func Objects() ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(Manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("failed to decode the embedded network manifests: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Init applies the add-on.
func Init(ctx context.Context, o *cli.Options, i *InitOptions) error {
	if i.DryRun {
		_, err := o.Out.Write(Manifests)
		return err
	}
	objs, err := Objects()
	if err != nil {
		return err
	}
	c, target, err := targetClient(ctx, o, i.Cluster)
	if err != nil {
		return err
	}
	if err := Apply(ctx, c, objs, i.Timeout, func(u *unstructured.Unstructured) {
		_, _ = fmt.Fprintf(o.Out, "%s/%s applied\n", strings.ToLower(u.GetKind()), u.GetName())
	}); err != nil {
		return fmt.Errorf("failed to install the network add-on in %s: %w", target, err)
	}
	_, _ = fmt.Fprintf(o.ErrOut, "The network add-on is installed in %s. Next: create Sites (network.yonder.dev) and label Nodes with their site.\n", target)
	return nil
}

// Apply server-side applies objs with FieldOwner: CRDs and namespaces first, then (once the CRDs are
// established, within timeout) everything else, so custom resources and namespaced objects resolve.
// applied, when set, is called after each object.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, timeout time.Duration, applied func(*unstructured.Unstructured)) error {
	first := func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "CustomResourceDefinition" || u.GetKind() == "Namespace"
	}
	for _, pass := range []bool{true, false} {
		for _, u := range objs {
			if first(u) != pass {
				continue
			}
			if err := c.Patch(ctx, u.DeepCopy(), client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil { //nolint:staticcheck // client.Apply with unstructured is the documented SSA path
				return fmt.Errorf("failed to apply %s %s: %w", u.GetKind(), name(u), err)
			}
			if applied != nil {
				applied(u)
			}
		}
		if pass {
			if err := waitEstablished(ctx, c, objs, timeout); err != nil {
				return err
			}
		}
	}
	return nil
}

func name(u *unstructured.Unstructured) string {
	if u.GetNamespace() != "" {
		return u.GetNamespace() + "/" + u.GetName()
	}
	return u.GetName()
}

func targetClient(ctx context.Context, o *cli.Options, cluster string) (client.Client, string, error) {
	if cluster == "" {
		c, err := o.Client()
		if err != nil {
			return nil, "", err
		}
		cfg, _ := o.RESTConfig()
		return c, cfg.Host, nil
	}
	ns, err := o.Ns()
	if err != nil {
		return nil, "", err
	}
	mgmt, err := o.Client()
	if err != nil {
		return nil, "", err
	}
	wl, err := cli.WorkloadFor(ctx, mgmt, ns, cluster)
	if err != nil {
		return nil, "", err
	}
	return wl.Client, "the workload cluster of " + ns + "/" + cluster, nil
}

func waitEstablished(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, timeout time.Duration) error {
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd); err != nil {
				return false, nil //nolint:nilerr // keep polling until the timeout
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("failed to wait for CRD %s to be established: %w", u.GetName(), err)
		}
	}
	return nil
}
