package main

import (
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/yonder-dev/yonder/cmd/kubectl-yonder/internal/cli"
)

// registerFlagCompletions completes kubectl's --context, --cluster and --user from the kubeconfig and
// -n/--namespace from the management cluster, as kubectl does.
func registerFlagCompletions(root *cobra.Command, o *cli.Options) {
	fromKubeconfig := func(pick func(contexts, clusters, users []string) []string) cobra.CompletionFunc {
		return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			raw, err := o.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var ctxs, cls, users []string
			for n := range raw.Contexts {
				ctxs = append(ctxs, n)
			}
			for n := range raw.Clusters {
				cls = append(cls, n)
			}
			for n := range raw.AuthInfos {
				users = append(users, n)
			}
			return withPrefix(pick(ctxs, cls, users), prefix), cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = root.RegisterFlagCompletionFunc("context", fromKubeconfig(func(c, _, _ []string) []string { return c }))
	_ = root.RegisterFlagCompletionFunc("cluster", fromKubeconfig(func(_, c, _ []string) []string { return c }))
	_ = root.RegisterFlagCompletionFunc("user", fromKubeconfig(func(_, _, u []string) []string { return u }))
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := o.Client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := &corev1.NamespaceList{}
		if err := c.List(cmd.Context(), list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, ns := range list.Items {
			names = append(names, ns.Name)
		}
		return withPrefix(names, prefix), cobra.ShellCompDirectiveNoFileComp
	})
}

func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
