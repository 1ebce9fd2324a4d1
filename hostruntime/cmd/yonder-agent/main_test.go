package main

import (
	"maps"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/hostruntime/internal/agent"
)

// The boot unit carries the host-side flags that differ from their defaults, which the agent knows by its
// constants: a flag default that drifted from them, or a new flag the unit does not carry, would drop a
// setting the node needs at boot (agent's bootArgs lists them).
func TestBootstrapAndUpgradeFlagDefaultsAreTheAgentsDefaults(t *testing.T) {
	want := map[string]string{
		"config": agentv1.DefaultPath, "state-dir": agent.DefaultStateDir, "machine-name": "", "cgroup-name": "",
		"sentinel": agent.DefaultSentinel, "provider-id-file": agent.DefaultProviderIDFile, "network-namespace-path": "",
		"pod-cidr": "", "sandbox-image": agent.DefaultSandboxImage, "node-lease-duration-seconds": "0",
		"ready-timeout": agent.DefaultReadyTimeout.String(),
	}
	for _, name := range []string{"bootstrap", "upgrade"} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			cmd, _, err := newRoot().Find([]string{name})
			g.Expect(err).NotTo(HaveOccurred())
			var all []string
			cmd.Flags().VisitAll(func(f *pflag.Flag) { all = append(all, f.Name) })
			cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) { all = append(all, f.Name) })
			g.Expect(all).To(ConsistOf(slices.Collect(maps.Keys(want))))
			for flag, def := range want {
				f := cmd.Flags().Lookup(flag)
				if f == nil {
					f = cmd.InheritedFlags().Lookup(flag)
				}
				g.Expect(f).NotTo(BeNil(), flag)
				g.Expect(f.DefValue).To(Equal(def), flag)
			}
		})
	}
}
