package yondercontrolplane_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"

	controlplanev1 "github.com/yonder-dev/yonder/controlplane/api/v1alpha1"
	"github.com/yonder-dev/yonder/controlplane/setup"
	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/envtest"
)

// watchFilter is the suite's --watch-filter value: objects without the label must be ignored.
const watchFilter = "ycp-suite"

var (
	env *envtest.Environment
	// workload is the EXISTING cluster the tests attach: a second, real kube-apiserver.
	workload *controlplane.ControlPlane
)

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	SetDefaultConsistentlyDuration(3 * time.Second)
	if fuzzOnly() {
		// FuzzNormalizeKubeconfig needs no API server; each fuzz worker would start two otherwise.
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

// fuzzOnly is true for `go test -run '^$' -fuzz X` (hack/fuzz.sh) and its fuzz workers: no test runs.
func fuzzOnly() bool {
	flag.Parse()
	fuzz, run, worker := flag.Lookup("test.fuzz"), flag.Lookup("test.run"), flag.Lookup("test.fuzzworker")
	fuzzing := (fuzz != nil && fuzz.Value.String() != "") || (worker != nil && worker.Value.String() == "true")
	return fuzzing && run != nil && run.Value.String() == "^$"
}

func run(m *testing.M) int {
	var err error
	workload, err = controlplane.Start(context.Background(), controlplane.Options{Name: "attached"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the workload control plane did not start: %v\n", err)
		return 1
	}
	defer func() { _ = workload.Stop() }()
	return envtest.Run(m, envtest.Options{
		CRDDirectoryPaths:    []string{"controlplane/config/crd/bases"},
		WebhookManifestPaths: []string{"controlplane/config/webhook/manifests.yaml"},
		AddToScheme:          []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
		Setup: func(ctx context.Context, e *envtest.Environment) error {
			if err := setup.SetupWebhooks(e.Manager); err != nil {
				return err
			}
			return setup.SetupReconcilers(ctx, e.Manager, setup.Options{
				Controllers:   manager.Controllers{WatchFilterValue: watchFilter},
				RetryInterval: time.Second,
			})
		},
	}, func(e *envtest.Environment) { env = e })
}
