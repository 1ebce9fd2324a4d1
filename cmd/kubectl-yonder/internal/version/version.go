// Package version implements `kubectl yonder version`: the plugin's own version and commit (set with
// -ldflags by the release build) and, when the management cluster is reachable, the providers clusterctl
// installed there (its Provider inventory), as `kubectl version` shows client and server.
package version

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// Version and Commit are set by the release build:
// -ldflags "-X github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/version.Version=v0.1.0 -X ….Commit=<sha>".
var (
	Version = "dev"
	Commit  = ""
)

// Client is the plugin's own build.
type Client struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Provider is one provider clusterctl installed in the management cluster.
type Provider struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Namespace string `json:"namespace"`
	Version   string `json:"version"`
}

// Info is what `version` reports. Providers is empty and ServerError set when the management cluster
// could not be read.
type Info struct {
	Client      Client     `json:"clientVersion"`
	Server      string     `json:"server,omitempty"`
	Providers   []Provider `json:"providers,omitempty"`
	ServerError string     `json:"serverError,omitempty"`
}

// ClientInfo is the plugin's build: the release's -ldflags, else the module's VCS stamp (a plugin built
// with `go build` from a checkout).
func ClientInfo() Client {
	c := Client{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if c.Commit == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					c.Commit = s.Value
				}
			}
		}
	}
	return c
}

// NewCommand returns `version`.
func NewCommand(o *cli.Options) *cobra.Command {
	var clientOnly bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the providers installed in the management cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != cli.OutputYAML && output != cli.OutputJSON {
				return fmt.Errorf("unknown output format %q: use yaml or json", output)
			}
			info := Info{Client: ClientInfo()}
			if !clientOnly {
				gatherServer(cmd.Context(), o, &info)
			}
			return printInfo(o, output, &info)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "only the plugin's version; do not contact the management cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json (default: text)")
	return cmd
}

// gatherServer reads clusterctl's Provider inventory; an unreachable cluster is reported, not fatal (the
// plugin's version is still worth printing).
func gatherServer(ctx context.Context, o *cli.Options, info *Info) {
	cfg, err := o.RESTConfig()
	if err != nil {
		info.ServerError = err.Error()
		return
	}
	info.Server = cfg.Host
	c, err := o.Client()
	if err != nil {
		info.ServerError = err.Error()
		return
	}
	list := &clusterctlv1.ProviderList{}
	if err := c.List(ctx, list); err != nil {
		info.ServerError = fmt.Sprintf("failed to list clusterctl's Providers (is this a management cluster initialized with clusterctl init?): %v", err)
		return
	}
	for _, p := range list.Items {
		info.Providers = append(info.Providers, Provider{Name: p.ProviderName, Type: p.Type, Namespace: p.Namespace, Version: p.Version})
	}
	sort.Slice(info.Providers, func(i, j int) bool {
		a, b := info.Providers[i], info.Providers[j]
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.Name < b.Name
	})
}

func printInfo(o *cli.Options, output string, info *Info) error {
	switch output {
	case cli.OutputJSON:
		b, err := json.MarshalIndent(info, "", "    ")
		if err != nil {
			return fmt.Errorf("failed to encode the version: %w", err)
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", b)
		return err
	case cli.OutputYAML:
		b, err := yaml.Marshal(info)
		if err != nil {
			return fmt.Errorf("failed to encode the version: %w", err)
		}
		_, err = o.Out.Write(b)
		return err
	}
	c := info.Client
	_, _ = fmt.Fprintf(o.Out, "kubectl-yonder %s (commit %s, %s, %s)\n", c.Version, cli.Dash(c.Commit), c.GoVersion, c.Platform)
	switch {
	case info.ServerError != "":
		_, _ = fmt.Fprintf(o.Out, "Management cluster: unavailable: %s\n", info.ServerError)
	case info.Server != "":
		_, _ = fmt.Fprintf(o.Out, "Management cluster %s: %d providers\n", info.Server, len(info.Providers))
		rows := [][]string{}
		for _, p := range info.Providers {
			rows = append(rows, []string{p.Name, p.Type, p.Namespace, p.Version})
		}
		if len(rows) > 0 {
			return o.Table([]string{"PROVIDER", "TYPE", "NAMESPACE", "VERSION"}, rows)
		}
	}
	return nil
}
