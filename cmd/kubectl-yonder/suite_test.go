package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	// clusterctl's inventory (Provider objects), which `version` reads, ships in CAPI's module.
	capi, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-api").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to locate the CAPI module:", err)
		os.Exit(1)
	}
	os.Exit(envtest.Run(m, envtest.Options{
		CRDDirectoryPaths: []string{"infrastructure-ssh/config/crd/bases",
			filepath.Join(strings.TrimSpace(string(capi)), "cmd", "clusterctl", "config", "crd", "bases")},
		AddToScheme:            []func(*runtime.Scheme) error{infrav1.AddToScheme, clusterctlv1.AddToScheme},
		WithoutCAPIControllers: true,
	}, func(e *envtest.Environment) { env = e }))
}
