package e2e

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/bootstrap/reconcilers/yonderconfig"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/claim"
)

// tokenPattern is a bootstrap token, "<id>.<secret>"; the secret half is what must never leak.
var tokenPattern = regexp.MustCompile(`\b[a-z0-9]{6}\.([a-z0-9]{16})\b`)

// kubeconfigCredential is a kubeconfig's client key or token line.
var kubeconfigCredential = regexp.MustCompile(`(?m)^\s*(?:client-key-data|token):\s*(\S{16,})\s*$`)

// expectEventsTellTheStory checks what `kubectl get events` shows an operator of the scenarios so far in
// the hosts' namespace: each claim, bootstrap and release as an Event on the machine and on the host, and
// each bootstrap token's creation and deletion at the join; and that no Event message carries a secret of
// the namespace (an SSH private key, a bootstrap token's secret half, a kubeconfig's credentials, a
// password).
func expectEventsTellTheStory(ctx context.Context, t *testing.T) {
	t.Helper()
	evs := &corev1.EventList{}
	if err := st.Client.List(ctx, evs, client.InNamespace(st.HostNamespace)); err != nil {
		t.Fatalf("failed to list Events: %v", err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		seen[e.InvolvedObject.Kind+" "+e.Reason] = true
	}
	for _, want := range []string{
		"YonderSSHMachine " + claim.HostClaimedEvent, "YonderSSHHost " + claim.HostClaimedEvent,
		"YonderSSHMachine " + infrav1.YonderSSHMachineBootstrapExecutedCondition,
		"YonderSSHMachine " + infrav1.YonderSSHMachineHostCleanedCondition,
		"YonderSSHMachine " + claim.HostReleasedEvent, "YonderSSHHost " + claim.HostReleasedEvent,
		"YonderConfig " + yonderconfig.BootstrapTokenCreatedEvent, "YonderConfig " + yonderconfig.BootstrapTokenDeletedEvent,
	} {
		if !seen[want] {
			t.Errorf("no %s Event in namespace %s", want, st.HostNamespace)
		}
	}
	secrets := namespaceSecrets(ctx, t)
	if len(secrets) == 0 {
		t.Fatalf("found no secret values in namespace %s to look for (the scan would prove nothing)", st.HostNamespace)
	}
	for _, e := range evs.Items {
		for _, s := range secrets {
			if strings.Contains(e.Message, s) {
				t.Errorf("Event %s %s on %s %s carries a secret of namespace %s", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, st.HostNamespace)
			}
		}
	}
	t.Logf("%d Events in namespace %s: every claim, bootstrap, token and release told, none of %d secret values in them", len(evs.Items), st.HostNamespace, len(secrets))
}

// namespaceSecrets returns the secret values held by the hosts' namespace's Secrets: private key bodies,
// bootstrap token secret halves (in bootstrap data), kubeconfig client keys and tokens, passwords.
func namespaceSecrets(ctx context.Context, t *testing.T) []string {
	t.Helper()
	list := &corev1.SecretList{}
	if err := st.Client.List(ctx, list, client.InNamespace(st.HostNamespace)); err != nil {
		t.Fatalf("failed to list Secrets: %v", err)
	}
	var out []string
	add := func(s string) {
		if s = strings.TrimSpace(s); len(s) >= 16 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, sec := range list.Items {
		for key, v := range sec.Data {
			text := string(v)
			if strings.Contains(text, "PRIVATE KEY-----") {
				for _, l := range strings.Split(text, "\n") {
					if !strings.HasPrefix(l, "-----") {
						add(l)
					}
				}
			}
			for _, m := range tokenPattern.FindAllStringSubmatch(text, -1) {
				add(m[1])
			}
			for _, m := range kubeconfigCredential.FindAllStringSubmatch(text, -1) {
				add(m[1])
			}
			if strings.Contains(strings.ToLower(key), "password") {
				add(text)
			}
		}
	}
	return out
}
