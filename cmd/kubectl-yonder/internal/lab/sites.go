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
// on the site's bridge forwards between them. The machine (managers, control planes, artifact server)
// reaches the site's hosts only through a route via the gateway, and the hosts reach the control plane
// only through it too.
type remoteSite struct {
	name    string
	net     *labnet.Network
	gateway *labnet.Attachment
	gwSite  netip.Addr
	hosts   []*hosts.Host
}

// startRemoteSite builds the site next to stack s and registers its hosts as YonderSSHHosts.
// mgmtSite is the site on the management bridge; earlier are the remote sites started before this one.
func startRemoteSite(ctx context.Context, s *stack.Stack, mgmtSite, name string, count int, earlier []*remoteSite) (_ *remoteSite, rerr error) {
	cred := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.HostNamespace, Name: HostsCredentialsSecret}, cred); err != nil {
		return nil, fmt.Errorf("failed to read the hosts' SSH credentials: %w", err)
	}
	r := &remoteSite{name: name}
	var err error
	if r.net, err = labnet.New(ctx); err != nil {
		return nil, fmt.Errorf("failed to create the network of site %s: %w", name, err)
	}
	defer func() {
		if rerr != nil {
			_ = r.close()
		}
	}()
	// The gateway: a namespace on the management bridge (cleaned up with it) with a second leg here.
	if r.gateway, err = s.Net.Attach(ctx, name+"-gw"); err != nil {
		return nil, err
	}
	r.gwSite = netip.AddrFrom4([4]byte{10, 250, byte(r.net.Slot), 254}) //nolint:gosec // slots are 1…250
	rootSide, peer := fmt.Sprintf("yv%dg", r.net.Slot), fmt.Sprintf("yp%dg", r.net.Slot)
	r.net.OnClose(func() error {
		_, err := run(context.Background(), "ip", "link", "del", rootSide)
		return ignoreMissing(err)
	})
	for _, c := range [][]string{
		{"ip", "link", "add", rootSide, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", rootSide, "master", r.net.Bridge},
		{"ip", "link", "set", rootSide, "up"},
		{"ip", "link", "set", peer, "netns", r.gateway.Namespace},
		{"ip", "-n", r.gateway.Namespace, "link", "set", peer, "name", "eth1"},
		{"ip", "-n", r.gateway.Namespace, "addr", "add", netip.PrefixFrom(r.gwSite, r.net.Prefix.Bits()).String(), "dev", "eth1"},
		{"ip", "-n", r.gateway.Namespace, "link", "set", "eth1", "up"},
		// /proc/sys/net belongs to the reader's network namespace: this turns on forwarding in the gateway only.
		{"nsenter", "--net=" + r.gateway.NamespacePath, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if _, err := run(ctx, c[0], c[1:]...); err != nil {
			return nil, fmt.Errorf("failed to set up the gateway of site %s: %w", name, err)
		}
	}
	if r.hosts, err = hosts.Start(ctx, r.net, name, count, hosts.Options{ClientKeyPEM: cred.Data["ssh-privatekey"], PrivateDirs: stack.HostPrivateDirs}); err != nil {
		return nil, fmt.Errorf("failed to start the hosts of site %s: %w", name, err)
	}
	// From now on the site is reachable only through the gateway, in both directions.
	for _, h := range r.hosts {
		if _, err := run(ctx, "ip", "-n", h.Namespace, "route", "replace", "default", "via", r.gwSite.String()); err != nil {
			return nil, err
		}
	}
	// The sites reach each other as over a WAN, never through this machine (which does not forward): the
	// management site's hosts and the earlier sites' gateways route this site's prefix via this gateway,
	// and this gateway routes theirs via theirs. The network add-on's tunnels between sites take this path.
	var wan [][]string
	for _, h := range s.Hosts[mgmtSite] {
		wan = append(wan, []string{"ip", "-n", h.Namespace, "route", "replace", r.net.Prefix.String(), "via", r.gateway.Address.String()})
	}
	for _, e := range earlier {
		wan = append(wan,
			[]string{"ip", "-n", e.gateway.Namespace, "route", "replace", r.net.Prefix.String(), "via", r.gateway.Address.String()},
			[]string{"ip", "-n", r.gateway.Namespace, "route", "replace", e.net.Prefix.String(), "via", e.gateway.Address.String()})
	}
	for _, c := range wan {
		if _, err := run(ctx, c[0], c[1:]...); err != nil {
			return nil, fmt.Errorf("failed to route between the sites: %w", err)
		}
	}
	if _, err := run(ctx, "ip", "addr", "flush", "dev", r.net.Bridge); err != nil {
		return nil, err
	}
	if _, err := run(ctx, "ip", "route", "replace", r.net.Prefix.String(), "via", r.gateway.Address.String()); err != nil {
		return nil, err
	}
	for _, h := range r.hosts {
		// Proves both directions through the gateway: SSH from this machine, HTTPS from the host to the workload apiserver.
		out, err := h.Output(ctx, "curl -sk --max-time 10 "+s.Workload.Endpoint+"/version")
		if err != nil || !strings.Contains(out, "gitVersion") {
			return nil, fmt.Errorf("host %s at site %s does not reach the workload apiserver through gateway %s: %v %s", h.Name, name, r.gateway.Address, err, out)
		}
		obj := &infrav1.YonderSSHHost{
			ObjectMeta: metav1.ObjectMeta{Name: h.Name, Namespace: s.HostNamespace, Labels: map[string]string{"yonder.dev/site": name}},
			Spec: infrav1.YonderSSHHostSpec{
				SSHEndpoint: infrav1.SSHEndpoint{
					Address: h.Address.String(), Port: int32(h.Port), User: h.User, //nolint:gosec // 22
					CredentialsSecretRef: infrav1.SecretReference{Name: HostsCredentialsSecret},
					HostKey:              strings.TrimSpace(string(sshAuthorizedKey(h))),
				},
				FailureDomain: name,
			},
		}
		if err := s.Client.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("failed to register host %s: %w", h.Name, err)
		}
	}
	// The stack resets every host's node before it stops (yonder-agent reset over SSH).
	s.Hosts[name] = r.hosts
	return r, nil
}

// close removes the route and the site's network (its hosts, the gateway's second leg, the bridge). The
// gateway namespace itself goes with the management network.
func (r *remoteSite) close() error {
	if r.net == nil {
		return nil
	}
	_, _ = run(context.Background(), "ip", "route", "del", r.net.Prefix.String())
	return r.net.Close()
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("failed to run %s %s: %s: %w", name, strings.Join(args, " "), strings.TrimSpace(string(out)), err)
	}
	return string(out), nil
}

func ignoreMissing(err error) error {
	if err != nil && strings.Contains(err.Error(), "Cannot find device") {
		return nil
	}
	return err
}

func sshAuthorizedKey(h *hosts.Host) []byte { return ssh.MarshalAuthorizedKey(h.HostKey) }
