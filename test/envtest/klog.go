package envtest

import (
	"flag"

	"k8s.io/klog/v2"
)

// flagSet returns klog's flags, registered once, so tests can set the log verbosity.
func flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}
