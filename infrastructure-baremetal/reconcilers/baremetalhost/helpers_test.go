package baremetalhost_test

import (
	"context"
	"net"
	"os"
	"strconv"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

type corev1Secret = corev1.Secret

func apierrorsIsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// patchHost changes a host's spec or metadata as a user (or CAPM3) would, retrying on conflicts.
func patchHost(g Gomega, h *metal3v1.BareMetalHost, mutate func(*metal3v1.BareMetalHost)) {
	g.Eventually(func() error {
		cur := &metal3v1.BareMetalHost{}
		if err := env.Get(context.Background(), client.ObjectKeyFromObject(h), cur); err != nil {
			return err
		}
		mutate(cur)
		return env.Update(context.Background(), cur)
	}).Should(Succeed())
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
