package admission_test

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/test/envtest"
)

var env *envtest.Environment

func TestMain(m *testing.M) {
	SetDefaultEventuallyTimeout(90 * time.Second)
	os.Exit(envtest.Run(m, testenv.Options(), func(e *envtest.Environment) { env = e }))
}
