package main

import (
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(envtest.Run(m, envtest.Options{
		CRDDirectoryPaths:      []string{"infrastructure-ssh/config/crd/bases"},
		AddToScheme:            []func(*runtime.Scheme) error{infrav1.AddToScheme},
		WithoutCAPIControllers: true,
	}, func(e *envtest.Environment) { env = e }))
}
