package yonderconfig_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"

	bootstrapv1 "github.com/yonder-dev/yonder/bootstrap/api/v1alpha1"
	"github.com/yonder-dev/yonder/bootstrap/internal/cloudinit"
	"github.com/yonder-dev/yonder/bootstrap/setup"
	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	cpsetup "github.com/yonder-dev/yonder/controlplane/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/envtest"
)

// watchFilter is the suite's --watch-filter value.
const watchFilter = "ycfg-suite"

// defaultAgent stands in for the manager's --agent-url/--agent-sha256.
var defaultAgent = cloudinit.AgentSource{URL: "http://10.250.0.1:8080/yonder-agent", SHA256: strings.Repeat("ab", 32)}

var (
	env      *envtest.Environment
	workload *controlplane.ControlPlane
)

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	SetDefaultConsistentlyDuration(3 * time.Second)
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	workload, err = controlplane.Start(context.Background(), controlplane.Options{Name: "workers"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the workload control plane did not start: %v\n", err)
		return 1
	}
	defer func() { _ = workload.Stop() }()
	return envtest.Run(m, envtest.Options{
		// The control-plane adapter runs too, for the story where both Yonder providers work together.
		CRDDirectoryPaths:    []string{"bootstrap/config/crd/bases", "controlplane/config/crd/bases"},
		WebhookManifestPaths: []string{"bootstrap/config/webhook/manifests.yaml", "controlplane/config/webhook/manifests.yaml"},
		AddToScheme:          []func(*runtime.Scheme) error{bootstrapv1.AddToScheme, controlplanev1.AddToScheme},
		Setup: func(ctx context.Context, e *envtest.Environment) error {
			if err := setup.SetupWebhooks(e.Manager); err != nil {
				return err
			}
			if err := cpsetup.SetupWebhooks(e.Manager); err != nil {
				return err
			}
			filter := manager.Controllers{WatchFilterValue: watchFilter}
			if err := cpsetup.SetupReconcilers(ctx, e.Manager, cpsetup.Options{Controllers: filter, RetryInterval: time.Second}); err != nil {
				return err
			}
			return setup.SetupReconcilers(ctx, e.Manager, setup.Options{
				Controllers:        filter,
				ClusterCache:       e.ClusterCache,
				DefaultAgent:       defaultAgent,
				TokenCheckInterval: time.Second,
			})
		},
	}, func(e *envtest.Environment) { env = e })
}
