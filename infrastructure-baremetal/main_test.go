package main

import (
	"os"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// clusterctlVar is the ${VAR} / ${VAR:=default} syntax clusterctl substitutes in components YAML.
var clusterctlVar = regexp.MustCompile(`\$\{([A-Z0-9_]+)(?::=([^}]*))?\}`)

// render substitutes variables the way clusterctl does (a set variable wins, else the default).
func render(text string, vars map[string]string) string {
	return clusterctlVar.ReplaceAllStringFunc(text, func(m string) string {
		sub := clusterctlVar.FindStringSubmatch(m)
		if v, ok := vars[sub[1]]; ok {
			return v
		}
		return sub[2]
	})
}

// The Deployment's args must parse with the manager's own flags and give what the variables say: empty
// defaults must arrive empty (not as a literal `""`), and --namespace must be passed like in the other
// providers, with POD_NAMESPACE for leader election.
func TestManagerDeploymentArgsParseWithTheManagersFlags(t *testing.T) {
	raw, err := os.ReadFile("config/manager/manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                   string
		vars                   map[string]string
		wantNS, wantFilter     string
		wantBootIf, wantBootIP string
		wantUnsigned           bool
		wantEKConfigMap        string
		wantRate               float64
		wantEnvelopeTTL        time.Duration
	}{
		{name: "defaults", wantRate: 5, wantEnvelopeTTL: 10 * time.Minute},
		{name: "set", vars: map[string]string{"YONDER_WATCH_NAMESPACE": "team-a", "YONDER_WATCH_FILTER": "shard-1",
			"YONDER_BOOT_INTERFACE": "eno2", "YONDER_BOOT_SERVER_IP": "192.0.2.1", "YONDER_INSECURE_UNSIGNED_BOOT_DATA": "true",
			"YONDER_EK_ROOTS_CONFIGMAP": "yonder-system/ek-roots", "YONDER_ATTESTATION_RATE_LIMIT": "0.5", "YONDER_ATTESTATION_RATE_BURST": "2",
			"YONDER_ATTESTATION_ENVELOPE_TTL": "3m"},
			wantNS: "team-a", wantFilter: "shard-1", wantBootIf: "eno2", wantBootIP: "192.0.2.1", wantUnsigned: true,
			wantEKConfigMap: "yonder-system/ek-roots", wantRate: 0.5, wantEnvelopeTTL: 3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := &appsv1.Deployment{}
			g.Expect(yaml.UnmarshalStrict([]byte(render(string(raw), tc.vars)), d)).To(Succeed())
			g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(1))
			c := d.Spec.Template.Spec.Containers[0]
			fs := pflag.NewFlagSet("yonder-metal-manager", pflag.ContinueOnError)
			f := addFlags(fs)
			g.Expect(fs.Parse(c.Args)).To(Succeed())
			g.Expect(fs.Args()).To(BeEmpty(), "every arg is a flag or its value")
			g.Expect(fs.Changed("namespace")).To(BeTrue(), "--namespace is passed")
			g.Expect(f.manager.WatchNamespace).To(Equal(tc.wantNS))
			g.Expect(f.manager.WatchFilter).To(Equal(tc.wantFilter))
			g.Expect(f.manager.LeaderElect).To(BeTrue())
			// Boot services stay off unless the interface is set (an empty value, not a literal "").
			g.Expect(f.host.BootInterface).To(Equal(tc.wantBootIf))
			g.Expect(f.host.BootServerIP).To(Equal(tc.wantBootIP))
			g.Expect(f.host.BootHTTPPort).To(Equal(8080))
			g.Expect(f.host.BootArtifactsDir).To(Equal("/var/lib/yonder/boot"))
			g.Expect(f.host.BootSigningKey).To(BeEmpty())
			g.Expect(f.host.InsecureUnsignedBootData).To(Equal(tc.wantUnsigned), "unsigned boot data only when asked for")
			g.Expect(f.host.EKRootsConfigMap).To(Equal(tc.wantEKConfigMap))
			g.Expect(f.host.AttestationRateLimit).To(Equal(tc.wantRate))
			g.Expect(f.host.AttestationEnvelopeTTL).To(Equal(tc.wantEnvelopeTTL))
			g.Expect(f.host.Validate()).To(Succeed())
			var podNS string
			for _, e := range c.Env {
				if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					podNS = e.ValueFrom.FieldRef.FieldPath
				}
			}
			g.Expect(podNS).To(Equal("metadata.namespace"))
		})
	}
}
