package manager

import (
	"flag"
	"fmt"
	"sync/atomic"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as CAPI's managers offer it.
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// addLoggingFlags registers component-base's logging flags the way CAPI's managers do: --logging-format
// (text, the default, or json), -v, --vmodule and --log-flush-frequency. They replace klog's own flag
// set, which would register -v a second time.
func (o *Options) addLoggingFlags(fs *pflag.FlagSet) {
	o.Logs = logs.NewOptions()
	logsv1.AddFlags(o.Logs, fs)
}

// Parse parses args into fs, which AddFlags and the manager's own flags filled, and applies the logging
// flags. Every manager's main.go calls it first, so a bad value (--logging-format=xml) fails before the
// manager reads a kubeconfig or logs a line, and every later line has the chosen format.
func (o *Options) Parse(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return o.applyLogging()
}

// AddGoLoggingFlags registers the same logging flags as AddFlags on a Go flag.FlagSet, for a command that
// parses one (yonder-net-controller), and returns their configuration for ApplyLogging. fs must not hold
// klog.InitFlags's set: both register -v and --vmodule.
func AddGoLoggingFlags(fs *flag.FlagSet) *logsv1.LoggingConfiguration {
	c := logs.NewOptions()
	logsv1.AddGoFlags(c, fs)
	return c
}

// applyLogging applies o.Logs; AddFlags sets it, a bare Options gets the defaults.
func (o *Options) applyLogging() error {
	if o.Logs == nil {
		o.Logs = logs.NewOptions()
	}
	return ApplyLogging(o.Logs)
}

// ApplyLogging validates and applies c, the parsed logging flags (once per process: klog's logger is
// global), and hands the result to controller-runtime, so the reconcilers' ctrl.LoggerFrom loggers write
// the same format. Options.Parse calls it; a command with a Go flag.FlagSet calls it right after parsing,
// before it reads a kubeconfig or logs a line.
func ApplyLogging(c *logsv1.LoggingConfiguration) error {
	if err := logsv1.ValidateAndApply(c, nil); err != nil {
		return fmt.Errorf("failed to apply the logging flags (--logging-format=%s): %w", c.Format, err)
	}
	ctrl.SetLogger(klog.Background())
	loggingApplied.Store(true)
	return nil
}

// loggingApplied tells Main that the logging flags are in force, so that run's error goes through the
// configured logger.
var loggingApplied atomic.Bool
