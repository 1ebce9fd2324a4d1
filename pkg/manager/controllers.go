package manager

import (
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// Controllers are the settings every provider's reconcilers share; each provider's setup.Options
// embeds them, and main.go fills them from Options.
type Controllers struct {
	// Name is the manager's name (e.g. yonder-ssh-manager): the user agent towards workload clusters.
	Name string
	// WatchFilterValue limits reconciliation to objects labelled cluster.x-k8s.io/watch-filter=<value>.
	WatchFilterValue string
	// WatchNamespace is the one namespace the manager watches ("" all): a provider's own caches follow it.
	WatchNamespace string
	// SkipNameValidation lets tests register the same controllers in several managers of one process.
	SkipNameValidation bool
}

// Controllers returns the settings of the reconcilers of a manager built with o.
func (o *Options) Controllers() Controllers {
	return Controllers{Name: o.Name, WatchFilterValue: o.WatchFilter, WatchNamespace: o.WatchNamespace}
}

// Options returns controller options with concurrency parallel reconciles (10 when not positive).
func (c Controllers) Options(concurrency int) controller.Options {
	if concurrency <= 0 {
		concurrency = 10
	}
	opts := controller.Options{MaxConcurrentReconciles: concurrency}
	if c.SkipNameValidation {
		opts.SkipNameValidation = &c.SkipNameValidation
	}
	return opts
}
