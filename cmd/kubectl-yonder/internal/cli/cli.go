// Package cli holds what every kubectl-yonder command shares: kubectl's connection flags (--kubeconfig,
// --context, -n/--namespace), the output flag (-o yaml|json|wide), the scheme of Yonder's and CAPI's kinds,
// and printing. k8s.io/cli-runtime is not used: it would pull kustomize and a second copy of kubectl's
// dependency tree into the module for four flags that client-go's clientcmd already implements.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Scheme knows the kinds kubectl-yonder reads and writes: Kubernetes core, CAPI core, Yonder's providers
// and the network add-on.
var Scheme = runtime.NewScheme()

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme, bootstrapv1.AddToScheme,
		controlplanev1.AddToScheme, netv1.AddToScheme,
	} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
}

// Output formats accepted by -o.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputYAML  = "yaml"
	OutputJSON  = "json"
)

// Options are the flags and streams shared by every command.
type Options struct {
	// Kubeconfig, Context and Namespace are kubectl's flags of the same names.
	Kubeconfig string
	Context    string
	Namespace  string
	// Output is -o: "" (table), wide, yaml or json.
	Output string

	// Out and ErrOut are where results and progress go (stdout and stderr by default).
	Out    io.Writer
	ErrOut io.Writer
	// Now is the clock (tests pin it).
	Now func() time.Time

	// config overrides the kubeconfig lookup (tests).
	config *rest.Config
}

// NewOptions returns options writing to the process's stdout and stderr.
func NewOptions() *Options {
	return &Options{Out: os.Stdout, ErrOut: os.Stderr, Now: time.Now}
}

// AddFlags registers the connection flags (persistent, so every subcommand has them, as in kubectl).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path to the kubeconfig of the MANAGEMENT cluster (default: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context to use")
	fs.StringVarP(&o.Namespace, "namespace", "n", "", "namespace (default: the context's namespace, else \"default\")")
}

// AddOutputFlag registers -o for commands that print objects.
func (o *Options) AddOutputFlag(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Output, "output", "o", "", "output format: wide, yaml or json (default: a table)")
}

// ValidateOutput rejects an unknown -o before anything is contacted.
func (o *Options) ValidateOutput() error {
	switch o.Output {
	case OutputTable, OutputWide, OutputYAML, OutputJSON:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use wide, yaml or json", o.Output)
}

// WithConfig makes the options use cfg instead of a kubeconfig (tests).
func (o *Options) WithConfig(cfg *rest.Config, namespace string) *Options {
	o.config, o.Namespace = cfg, namespace
	return o
}

func (o *Options) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
}

// RESTConfig is the management cluster's rest config.
func (o *Options) RESTConfig() (*rest.Config, error) {
	if o.config != nil {
		return rest.CopyConfig(o.config), nil
	}
	cfg, err := o.loader().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig (use --kubeconfig or $KUBECONFIG): %w", err)
	}
	cfg.UserAgent = "kubectl-yonder"
	return cfg, nil
}

// Client is a client of the management cluster.
func (o *Options) Client() (client.Client, error) {
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("failed to create a client for %s: %w", cfg.Host, err)
	}
	return c, nil
}

// Ns is the namespace to work in: -n, else the context's, else "default".
func (o *Options) Ns() (string, error) {
	if o.Namespace != "" {
		return o.Namespace, nil
	}
	if o.config != nil {
		return "default", nil
	}
	ns, _, err := o.loader().Namespace()
	if err != nil {
		return "", fmt.Errorf("failed to read the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// PrintObjects writes objs as YAML (a List when there are several, like kubectl) or JSON. It returns
// false when the output format is a table, which the caller prints itself.
func (o *Options) PrintObjects(objs ...client.Object) (bool, error) {
	if o.Output != OutputYAML && o.Output != OutputJSON {
		return false, nil
	}
	items := make([]any, 0, len(objs))
	for _, obj := range objs {
		if gvk, err := apiutil.GVKForObject(obj, Scheme); err == nil {
			obj.GetObjectKind().SetGroupVersionKind(gvk)
		}
		obj.SetManagedFields(nil)
		items = append(items, obj)
	}
	var v any = map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
	if len(items) == 1 {
		v = items[0]
	}
	var out []byte
	var err error
	if o.Output == OutputJSON {
		out, err = json.MarshalIndent(v, "", "    ")
		out = append(out, '\n')
	} else {
		out, err = yaml.Marshal(v)
	}
	if err != nil {
		return true, fmt.Errorf("failed to encode output: %w", err)
	}
	_, err = o.Out.Write(out)
	return true, err
}

// Table writes rows under a header, aligned like kubectl's tables.
func (o *Options) Table(header []string, rows [][]string) error {
	w := tabwriter.NewWriter(o.Out, 0, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		_, _ = fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

// Age formats how long ago t was, as kubectl does ("5m", "3h2m", "<unknown>").
func (o *Options) Age(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(o.Now().Sub(t))
}

// Dash returns s, or "-" for an empty string (empty table cells confuse column readers).
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// GroupKind is a convenience for error messages.
func GroupKind(obj runtime.Object) schema.GroupKind {
	gvk, err := apiutil.GVKForObject(obj, Scheme)
	if err != nil {
		return schema.GroupKind{}
	}
	return gvk.GroupKind()
}
