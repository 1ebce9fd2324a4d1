package yondercontrolplane

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// minSecretLen is the shortest credential the leak check looks for: shorter ones ("a", "admin") occur
// in any message by chance.
const minSecretLen = 12

// secretLine finds credential values in kubeconfig text that does not parse.
var secretLine = regexp.MustCompile(`(?m)^\s*-?\s*(?:token|password|client-key-data|access-token|refresh-token|id-token)\s*:\s*["']?([^"'\s]+)`)

// credentials lists the secret values in a user's kubeconfig, and the names and other values a refusal
// may legitimately quote (a credential equal to one of those is not a leak).
func credentials(data []byte, in *clientcmdapi.Config) (secrets, quotable []string) {
	add := func(s string) {
		if len(s) >= minSecretLen {
			secrets = append(secrets, s)
		}
	}
	for _, m := range secretLine.FindAllSubmatch(data, -1) {
		add(string(m[1]))
	}
	if in == nil {
		return secrets, nil
	}
	quotable = append(quotable, in.CurrentContext)
	for name, u := range in.AuthInfos {
		quotable = append(quotable, name)
		if u == nil {
			continue
		}
		add(u.Token)
		add(u.Password)
		add(string(u.ClientKeyData))
		if u.Exec != nil {
			quotable = append(quotable, u.Exec.Command)
		}
		if u.AuthProvider != nil {
			quotable = append(quotable, u.AuthProvider.Name)
			for _, v := range u.AuthProvider.Config {
				add(v)
			}
		}
	}
	for name, c := range in.Contexts {
		quotable = append(quotable, name)
		if c != nil {
			quotable = append(quotable, c.Cluster, c.AuthInfo)
		}
	}
	for name, c := range in.Clusters {
		quotable = append(quotable, name)
		if c != nil {
			quotable = append(quotable, c.Server)
		}
	}
	return secrets, quotable
}

// checkNoLeak fails when msg carries one of the kubeconfig's credentials.
func checkNoLeak(t *testing.T, what, msg string, secrets, quotable []string) {
	t.Helper()
	for _, s := range secrets {
		if !strings.Contains(msg, s) {
			continue
		}
		legit := false
		for _, q := range quotable {
			legit = legit || strings.Contains(q, s)
		}
		if !legit {
			t.Fatalf("%s carries the credential %q: %s", what, s, msg)
		}
	}
}

// FuzzNormalizeKubeconfig feeds a user's kubeconfig Secret through what the reconciler does with it:
// normalize (pick the current context, keep its cluster and user), build the client config, derive the
// control plane endpoint. Whatever the Secret holds: no panic; a refusal is a kubeconfigError with a
// KubeconfigValid reason, and neither it nor a client-config error quotes a credential (both land in a
// condition message anyone who reads the YonderControlPlane sees); an accepted kubeconfig is written so
// that it parses again, names the same server and CA as the chosen context of the input, has exactly one
// cluster, user and context, normalizes to itself, and yields a client and an endpoint.
func FuzzNormalizeKubeconfig(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "kubeconfig", "*"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed kubeconfigs in testdata/kubeconfig: %v", err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		in, loadErr := clientcmd.Load(data)
		if loadErr != nil {
			in = nil
		}
		secrets, quotable := credentials(data, in)

		out, cfg, err := normalizeKubeconfig("edge", data)
		if err != nil {
			var kerr *kubeconfigError
			if !errors.As(err, &kerr) || kerr.reason == "" || kerr.message == "" {
				t.Fatalf("refusal %v is not a kubeconfigError with a reason", err)
			}
			checkNoLeak(t, "refusal", err.Error(), secrets, quotable)
			return
		}
		if loadErr != nil {
			t.Fatalf("accepted a kubeconfig that does not load: %v", loadErr)
		}

		again, err := clientcmd.Load(out)
		if err != nil {
			t.Fatalf("normalized kubeconfig does not parse: %v\n%s", err, out)
		}
		if len(again.Clusters) != 1 || len(again.AuthInfos) != 1 || len(again.Contexts) != 1 || again.CurrentContext != "edge-admin@edge" {
			t.Fatalf("normalized kubeconfig is not one cluster, user and context named after the Cluster:\n%s", out)
		}
		ctxName := in.CurrentContext
		if ctxName == "" {
			for name := range in.Contexts {
				ctxName = name
			}
		}
		src := in.Clusters[in.Contexts[ctxName].Cluster]
		got := again.Clusters["edge"]
		if got == nil || got.Server != src.Server || !bytes.Equal(got.CertificateAuthorityData, src.CertificateAuthorityData) ||
			got.Server != cfg.Clusters["edge"].Server || !bytes.Equal(got.CertificateAuthorityData, cfg.Clusters["edge"].CertificateAuthorityData) {
			t.Fatalf("normalized kubeconfig names another server or CA than context %q of the input:\n%s", ctxName, out)
		}
		if u := again.AuthInfos["edge-admin"]; u == nil || u.Token != in.AuthInfos[in.Contexts[ctxName].AuthInfo].Token {
			t.Fatalf("normalized kubeconfig lost the user's credentials:\n%s", out)
		}
		out2, _, err := normalizeKubeconfig("edge", out)
		if err != nil || !bytes.Equal(out2, out) {
			t.Fatalf("normalizing the normalized kubeconfig gives %v\n%s\ninstead of\n%s", err, out2, out)
		}

		restCfg, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
		if err != nil {
			checkNoLeak(t, "client config error", err.Error(), secrets, quotable)
			return
		}
		if _, err := endpointFromServer(restCfg.Host); err != nil {
			t.Fatalf("accepted server %q (client host %q) gives no control plane endpoint: %v", src.Server, restCfg.Host, err)
		}
	})
}
