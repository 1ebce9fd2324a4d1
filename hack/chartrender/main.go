// Command chartrender renders a Helm chart the way `helm template` does, for hack/release-repo.sh: cert-manager
// publishes its static manifest (cert-manager.yaml, what `clusterctl init` installs) as its chart rendered
// with the release's values, but only the chart itself is in cert-manager's Go module, and helm is not a tool
// this machine has. It loads the chart directory with Helm's own loader, renders every template with Helm's
// engine for the release name and namespace given, drops NOTES.txt, empty documents and hooks (a static
// manifest has no `helm install` to run them), and prints the rest in Helm's install order. VERSION becomes
// the chart's version and appVersion, as a chart's release process sets both (cert-manager's chart in its Go
// module says v0.0.0; its image tags and version labels come from them). Values are set as key.path=value
// pairs (strings, true/false, integers), like `helm template --set`.
//
// A module of its own: Helm's Kubernetes libraries are newer than the ones the root module and
// hack/certmanager build with.
package main

import (
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/strvals"
)

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: chartrender CHART_DIR RELEASE_NAME NAMESPACE VERSION [key=value ...]")
		os.Exit(2)
	}
	out, err := render(os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "chartrender: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

// render returns the chart's manifests without hooks, each document headed by `---` and a `# Source:` line
// as `helm template` writes them.
func render(dir, name, namespace, version string, sets []string) (string, error) {
	chrt, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("failed to load chart %s: %w", dir, err)
	}
	chrt.Metadata.Version, chrt.Metadata.AppVersion = version, version
	vals := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return "", fmt.Errorf("failed to parse value %q: %w", s, err)
		}
	}
	caps := common.DefaultCapabilities
	rv, err := util.ToRenderValues(chrt, vals, common.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return "", fmt.Errorf("failed to compute the values of chart %s: %w", dir, err)
	}
	files, err := engine.Render(chrt, rv)
	if err != nil {
		return "", fmt.Errorf("failed to render chart %s: %w", dir, err)
	}
	for f := range files {
		if strings.HasSuffix(f, "NOTES.txt") {
			delete(files, f)
		}
	}
	// Hooks come back apart from the manifests; a static manifest leaves them out.
	_, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return "", fmt.Errorf("failed to sort the manifests of chart %s: %w", dir, err)
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return b.String(), nil
}
