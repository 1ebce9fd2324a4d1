package describe

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	metalv1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1" //nolint:importas // the plugin reads both providers' kinds: infrav1 is the SSH provider's
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, envtest.Options{
		CRDDirectoryPaths: []string{"infrastructure-ssh/config/crd/bases", "infrastructure-baremetal/config/crd/bases",
			"infrastructure-baremetal/config/crd/metal3"},
		AddToScheme:            []func(*runtime.Scheme) error{infrav1.AddToScheme, metalv1.AddToScheme, metal3v1.AddToScheme},
		WithoutCAPIControllers: true,
	}, func(e *envtest.Environment) { env = e }))
}
