// Command lab brings up Yonder's local lab on this machine: a lab network, a real workload control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) bound to the lab bridge, and hosts at
// two sites, each a network namespace with a real sshd. It writes everything an operator needs into
// _lab/ (kubeconfig, SSH keys, known_hosts), checks that every host answers over SSH with its pinned
// host key and reaches the apiserver, then holds the lab until interrupted and removes it on exit.
//
// The lab grows with the providers: CAPI, Yonder's managers and joining nodes are added by their issues.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/yonder-dev/yonder/test/controlplane"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/testbins"
)

func main() {
	perSite := flag.Int("hosts-per-site", 2, "hosts to start at each of the two sites")
	hold := flag.Bool("hold", true, "keep the lab running until interrupted (false: check and tear down)")
	dir := flag.String("dir", filepath.Join(testbins.RepoRoot(), "_lab"), "where to write kubeconfig and keys")
	flag.Parse()
	if err := run(*perSite, *hold, *dir); err != nil {
		fmt.Fprintf(os.Stderr, "lab: %v\n", err)
		os.Exit(1)
	}
}

func run(perSite int, hold bool, dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Printf("[lab %5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	step("creating the lab network")
	n, err := labnet.New(ctx)
	if err != nil {
		return err
	}
	defer func() { step("removing the lab"); _ = n.Close() }()
	step("lab network %s on bridge %s", n.Prefix, n.Bridge)

	step("starting the workload control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Name: "yonder-lab", BindAddress: n.Gateway, WithControllerManager: true, WithScheduler: true,
	})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	kubeconfig := filepath.Join(dir, "workload.kubeconfig")
	if err := os.WriteFile(kubeconfig, cp.AdminKubeconfig, 0o600); err != nil {
		return err
	}
	step("workload apiserver %s ready (component logs in %s)", cp.Endpoint, cp.Logs())

	var all []*hosts.Host
	for _, site := range []string{"site-a", "site-b"} {
		step("starting %d hosts at %s (netns + sshd)", perSite, site)
		hs, err := hosts.Start(ctx, n, site, perSite, hosts.Options{})
		if err != nil {
			return err
		}
		all = append(all, hs...)
	}
	var knownHosts strings.Builder
	for _, h := range all {
		hd := filepath.Join(dir, "hosts", h.Name)
		if err := os.MkdirAll(hd, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(hd, "id_ed25519"), h.ClientKeyPEM, 0o600); err != nil {
			return err
		}
		knownHosts.WriteString(h.Address.String() + " " + string(ssh.MarshalAuthorizedKey(h.HostKey)))
		if err := os.WriteFile(filepath.Join(hd, "ca.crt"), cp.CACertPEM, 0o600); err != nil {
			return err
		}
		out, _, err := h.Run(ctx, "curl -sS --cacert "+filepath.Join(hd, "ca.crt")+" "+cp.Endpoint+"/version")
		if err != nil || !strings.Contains(string(out), "gitVersion") {
			return fmt.Errorf("host %s cannot reach the workload apiserver: %v %s", h.Name, err, out)
		}
		step("host %-10s %s  ssh ok (pinned host key), apiserver reachable", h.Name, h.Address)
	}
	if err := os.WriteFile(filepath.Join(dir, "known_hosts"), []byte(knownHosts.String()), 0o600); err != nil {
		return err
	}
	step("lab ready in %.1fs", time.Since(start).Seconds())
	fmt.Printf(`
  kubectl --kubeconfig %[1]s get --raw /version
  ssh -i %[2]s/hosts/%[3]s/id_ed25519 -o UserKnownHostsFile=%[2]s/known_hosts root@%[4]s hostname

Yonder's providers, CAPI and joining nodes arrive in this lab with their issues (see README).
`, kubeconfig, dir, all[0].Name, all[0].Address)
	if !hold {
		return nil
	}
	fmt.Println("Holding the lab; press Ctrl-C to tear it down.")
	<-ctx.Done()
	return nil
}
