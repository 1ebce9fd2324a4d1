// Package cli holds what every kubectl-yonder command shares: kubectl's connection flags (cli-runtime's
// genericclioptions.ConfigFlags: --kubeconfig, --context, --cluster, --user, -n/--namespace, --as, --token,
// --server, …), the output flag (-o through cli-runtime's printers), the scheme of Yonder's, CAPI's and
// Metal3's kinds, and printing.
package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	metalv1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1" //nolint:importas // the plugin reads both providers' kinds: infrav1 is the SSH provider's
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// Scheme knows the kinds kubectl-yonder reads and writes: Kubernetes core, CAPI core and clusterctl's
// inventory, Yonder's providers, Metal3's BareMetalHost and the network add-on.
var Scheme = runtime.NewScheme()

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, clusterv1.AddToScheme, clusterctlv1.AddToScheme,
		infrav1.AddToScheme, metalv1.AddToScheme, metal3v1.AddToScheme, bootstrapv1.AddToScheme,
		controlplanev1.AddToScheme, netv1.AddToScheme,
	} {
		if err := add(Scheme); err != nil {
			panic(err)
		}
	}
}

// Output formats of -o that kubectl-yonder prints itself (tables); every other value goes to cli-runtime's
// printers (yaml, json, name, jsonpath=…, go-template=…, as kubectl).
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputYAML  = "yaml"
	OutputJSON  = "json"
)

// Options are the flags and streams shared by every command.
type Options struct {
	// ConfigFlags are kubectl's connection flags, bound on the root command; they select the MANAGEMENT
	// cluster, its credentials and the namespace.
	ConfigFlags *genericclioptions.ConfigFlags
	// Output is -o: "" (table), wide, or any of cli-runtime's printer formats.
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
	// kubectl binds the deprecated --username/--password too: so does the plugin, so every kubectl flag works.
	f := genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag()
	f.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.UserAgent = "kubectl-yonder"
		return c
	}
	return &Options{ConfigFlags: f, Out: os.Stdout, ErrOut: os.Stderr, Now: time.Now}
}

// AddFlags registers kubectl's connection flags (persistent, so every subcommand has them, as in kubectl).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.ConfigFlags.AddFlags(fs)
}

// AddOutputFlag registers -o for commands that print objects.
func (o *Options) AddOutputFlag(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Output, "output", "o", "", "output format: wide, yaml, json, name, jsonpath=…, go-template=… (default: a table)")
}

// printFlags are cli-runtime's printer flags for the current -o.
func (o *Options) printFlags() *genericclioptions.PrintFlags {
	pf := genericclioptions.NewPrintFlags("").WithTypeSetter(Scheme)
	*pf.OutputFormat = o.Output
	return pf
}

// ValidateOutput rejects an unknown -o before anything is contacted.
func (o *Options) ValidateOutput() error {
	if o.Output == OutputTable || o.Output == OutputWide {
		return nil
	}
	pf := o.printFlags()
	if _, err := pf.ToPrinter(); err != nil {
		if genericclioptions.IsNoCompatiblePrinterError(err) {
			return fmt.Errorf("unknown output format %q: use wide, %s", o.Output, strings.Join(pf.AllowedFormats(), ", "))
		}
		return fmt.Errorf("invalid output format %q: %w", o.Output, err)
	}
	return nil
}

// WithConfig makes the options use cfg instead of a kubeconfig (tests).
func (o *Options) WithConfig(cfg *rest.Config, namespace string) *Options {
	o.config = cfg
	*o.ConfigFlags.Namespace = namespace
	return o
}

// RESTConfig is the management cluster's rest config, from kubectl's connection flags.
func (o *Options) RESTConfig() (*rest.Config, error) {
	if o.config != nil {
		return rest.CopyConfig(o.config), nil
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig (use --kubeconfig or $KUBECONFIG): %w", err)
	}
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
	if ns := *o.ConfigFlags.Namespace; ns != "" {
		return ns, nil
	}
	if o.config != nil {
		return "default", nil
	}
	ns, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("failed to read the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// PrintObjects prints objs with cli-runtime's printer for -o (one object alone, several as a v1 List, like
// kubectl). It returns false when the output format is a table, which the caller prints itself.
func (o *Options) PrintObjects(objs ...client.Object) (bool, error) {
	if o.Output == OutputTable || o.Output == OutputWide {
		return false, nil
	}
	p, err := o.printFlags().ToPrinter()
	if err != nil {
		return true, err
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, obj := range objs {
		u, err := ToUnstructured(obj)
		if err != nil {
			return true, err
		}
		list.Items = append(list.Items, *u)
	}
	var out runtime.Object = list
	if len(list.Items) == 1 {
		out = &list.Items[0]
	}
	if err := p.PrintObj(out, o.Out); err != nil {
		return true, fmt.Errorf("failed to print the output: %w", err)
	}
	return true, nil
}

// ToUnstructured converts obj with its kind set and without managed fields (noise in a dump).
func ToUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	obj = obj.DeepCopyObject()
	gvk, err := apiutil.GVKForObject(obj, Scheme)
	if err != nil {
		return nil, fmt.Errorf("failed to find the kind of %T: %w", obj, err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("failed to convert %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	u.SetManagedFields(nil)
	return u, nil
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
