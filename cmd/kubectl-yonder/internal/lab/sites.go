package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/labnet"
	"github.com/yonder-dev/yonder/test/stack"
)

// HostsCredentialsSecret is the Secret test/stack stores the hosts' shared SSH key in.
const HostsCredentialsSecret = "yonder-hosts-ssh" //nolint:gosec // the name of a Secret, not its content

// remoteSite is a site behind a gateway, like an edge location: its hosts sit on their own lab bridge,
// which has no address on this machine, and a gateway host with one leg on the management bridge and one
// on the site's bridge forwards between them. The machine (managers, control planes, registry)
// reaches the site's hosts only through a route via the gateway, and the hosts reach the control plane
// only through it too.
//
// A site behind NAT (nat) has a gateway that masquerades its hosts onto the management bridge with a new
// random source port for every mapping (as a carrier-grade NAT rebinds) and drops every packet from
// outside that no mapping expects, except from this machine: the management plane's own path to its
// hosts (SSH for the bootstrap, the API server to the kubelets), which a real edge site has through a
// bastion or a tunnel of its own. No other site routes to its network: its hosts can only be reached
// through connections they open themselves.
type remoteSite struct {
	name    string
	nat     bool
	net     *labnet.Network
	gateway *labnet.Attachment
	gwSite  netip.Addr
	hosts   []*hosts.Host
}

// startRemoteSite builds the site next to stack s and registers its hosts as YonderSSHHosts.
// mgmtSite is the site on the management bridge; earlier are the remote sites started before this one.
func startRemoteSite(ctx context.Context, s *stack.Stack, mgmtSite, name string, count int, nat bool, earlier []*remoteSite) (_ *remoteSite, rerr error) {
	cred := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.HostNamespace, Name: HostsCredentialsSecret}, cred); err != nil {
		return nil, fmt.Errorf("failed to read the hosts' SSH credentials: %w", err)
	}
	r := &remoteSite{name: name, nat: nat}
	var err error
	if r.net, err = labnet.New(ctx); err != nil {
		return nil, fmt.Errorf("failed to create the network of site %s: %w", name, err)
	}
	defer func() {
		if rerr != nil {
			_ = r.close()
		}
	}()
	if err := r.startGateway(ctx, s); err != nil {
		return nil, err
	}
	if r.hosts, err = hosts.Start(ctx, r.net, name, count, hosts.Options{ClientKeyPEM: cred.Data["ssh-privatekey"], PrivateDirs: stack.HostPrivateDirs}); err != nil {
		return nil, fmt.Errorf("failed to start the hosts of site %s: %w", name, err)
	}
	if err := r.route(ctx, s, mgmtSite, earlier); err != nil {
		return nil, err
	}
	if err := r.register(ctx, s); err != nil {
		return nil, err
	}
	// The stack resets every host's node before it stops (yonder-agent reset over SSH).
	s.Hosts[name] = r.hosts
	return r, nil
}

// startGateway creates the gateway: a namespace on the management bridge (cleaned up with it) with a
// second leg on the site's bridge, forwarding between them (and, behind NAT, masquerading and filtering).
func (r *remoteSite) startGateway(ctx context.Context, s *stack.Stack) error {
	var err error
	if r.gateway, err = s.Net.Attach(ctx, r.name+"-gw"); err != nil {
		return err
	}
	r.gwSite = netip.AddrFrom4([4]byte{10, 250, byte(r.net.Slot), 254}) //nolint:gosec // slots are 1…250
	rootSide, peer := fmt.Sprintf("yv%dg", r.net.Slot), fmt.Sprintf("yp%dg", r.net.Slot)
	r.net.OnClose(func() error {
		return ignoreMissing(run(context.Background(), "ip", "link", "del", rootSide))
	})
	cmds := [][]string{
		{"ip", "link", "add", rootSide, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", rootSide, "master", r.net.Bridge},
		{"ip", "link", "set", rootSide, "up"},
		{"ip", "link", "set", peer, "netns", r.gateway.Namespace},
		{"ip", "-n", r.gateway.Namespace, "link", "set", peer, "name", "eth1"},
		{"ip", "-n", r.gateway.Namespace, "addr", "add", netip.PrefixFrom(r.gwSite, r.net.Prefix.Bits()).String(), "dev", "eth1"},
		{"ip", "-n", r.gateway.Namespace, "link", "set", "eth1", "up"},
		// /proc/sys/net belongs to the reader's network namespace: this turns on forwarding in the gateway only.
		{"nsenter", "--net=" + r.gateway.NamespacePath, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	if r.nat {
		cmds = append(cmds, r.natRules(s.Net.Gateway)...)
	}
	for _, c := range cmds {
		if err := run(ctx, c[0], c[1:]...); err != nil {
			return fmt.Errorf("failed to set up the gateway of site %s: %w", r.name, err)
		}
	}
	return nil
}

// natRules make the gateway a NAT: masquerade with a random port per mapping onto the management bridge,
// and drop what comes from there unless it belongs to a mapping or comes from this machine (the
// management plane's access). The rules live in the gateway's namespace and go with it.
func (r *remoteSite) natRules(machine netip.Addr) [][]string {
	out := r.gateway.Interface
	ipt := func(args ...string) []string {
		return append([]string{"nsenter", "--net=" + r.gateway.NamespacePath, "iptables", "-w"}, args...)
	}
	var cmds [][]string
	cmds = append(cmds, ipt("-t", "nat", "-A", "POSTROUTING", "-o", out, "-j", "MASQUERADE", "--random-fully"))
	for _, chain := range []string{"FORWARD", "INPUT"} {
		cmds = append(cmds,
			ipt("-A", chain, "-i", out, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"),
			ipt("-A", chain, "-i", out, "-s", machine.String(), "-j", "ACCEPT"),
			ipt("-A", chain, "-i", out, "-j", "DROP"))
	}
	return cmds
}

// route makes the site reachable only through its gateway, in both directions. The sites reach each
// other as over a WAN, never through this machine (which does not forward): the management site's hosts
// and the earlier sites' gateways route a reachable site's prefix via its gateway, and its gateway routes
// theirs via theirs — except to a site behind NAT, whose prefix nobody but this machine routes.
func (r *remoteSite) route(ctx context.Context, s *stack.Stack, mgmtSite string, earlier []*remoteSite) error {
	var cmds [][]string
	for _, h := range r.hosts {
		cmds = append(cmds, []string{"ip", "-n", h.Namespace, "route", "replace", "default", "via", r.gwSite.String()})
	}
	if !r.nat {
		for _, h := range s.Hosts[mgmtSite] {
			cmds = append(cmds, []string{"ip", "-n", h.Namespace, "route", "replace", r.net.Prefix.String(), "via", r.gateway.Address.String()})
		}
	}
	for _, e := range earlier {
		if !r.nat {
			cmds = append(cmds, []string{"ip", "-n", e.gateway.Namespace, "route", "replace", r.net.Prefix.String(), "via", r.gateway.Address.String()})
		}
		if !e.nat {
			cmds = append(cmds, []string{"ip", "-n", r.gateway.Namespace, "route", "replace", e.net.Prefix.String(), "via", e.gateway.Address.String()})
		}
	}
	cmds = append(cmds, []string{"ip", "addr", "flush", "dev", r.net.Bridge},
		[]string{"ip", "route", "replace", r.net.Prefix.String(), "via", r.gateway.Address.String()})
	for _, c := range cmds {
		if err := run(ctx, c[0], c[1:]...); err != nil {
			return fmt.Errorf("failed to route site %s: %w", r.name, err)
		}
	}
	return nil
}

// register checks each host in both directions through the gateway (SSH from this machine, HTTPS from the
// host to the workload API server) and registers it as a YonderSSHHost.
func (r *remoteSite) register(ctx context.Context, s *stack.Stack) error {
	for _, h := range r.hosts {
		out, err := h.Output(ctx, "curl -sk --max-time 10 "+s.Workload.Endpoint+"/version")
		if err != nil || !strings.Contains(out, "gitVersion") {
			return fmt.Errorf("host %s at site %s does not reach the workload apiserver through gateway %s: %v %s", h.Name, r.name, r.gateway.Address, err, out)
		}
		obj := &infrav1.YonderSSHHost{
			ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: s.HostNamespace, Labels: map[string]string{"yonder.dev/site": r.name}},
			Spec: infrav1.YonderSSHHostSpec{
				SSHEndpoint: infrav1.SSHEndpoint{
					Address: h.Address.String(), Port: int32(h.Port), User: h.User, //nolint:gosec // 22
					CredentialsSecretRef: infrav1.SecretReference{Name: HostsCredentialsSecret},
					HostKey:              strings.TrimSpace(string(sshAuthorizedKey(h))),
				},
				FailureDomain: r.name,
			},
		}
		if err := s.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("failed to register host %s: %w", h.Name, err)
		}
	}
	return nil
}

// close removes the route and the site's network (its hosts, the gateway's second leg, the bridge). The
// gateway namespace itself goes with the management network.
func (r *remoteSite) close() error {
	if r.net == nil {
		return nil
	}
	_ = run(context.Background(), "ip", "route", "del", r.net.Prefix.String())
	return r.net.Close()
}

// run runs a command; its error carries the command's output.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("failed to run %s %s: %s: %w", name, strings.Join(args, " "), strings.TrimSpace(string(out)), err)
	}
	return nil
}

func ignoreMissing(err error) error {
	if err != nil && strings.Contains(err.Error(), "Cannot find device") {
		return nil
	}
	return err
}

func sshAuthorizedKey(h *hosts.Host) []byte { return ssh.MarshalAuthorizedKey(h.HostKey) }

// Inotify instances: every worker holds ~16 (its nspawn machine's systemd and journald, containerd,
// kubelet; measured 16 per lab host) besides the control planes' and managers' ~100, and the kernel's
// default limit is 128 per user — all of it root here. With four sites the lab's kubelets then failed at
// start with "inotify_init: too many open files", so the lab asks for 256 + 32 per host (at least the
// stack's own 512) before its hosts start.
func inotifyInstancesFor(hosts int) int { return max(512, 256+32*hosts) }
