package baremetalhost

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// bmcSessions keeps each host's Redfish client, and with it its BMC session, from one reconcile to the
// next. Opening a session costs three requests a pass (service root, session create, logout) and a BMC
// allows few sessions at once; a host takes several passes to register, inspect and provision, and a
// settled host is polled for power. The controller never reconciles one host twice at once, so a client
// is taken out for a pass and put back after it: it is never shared.
//
// A kept client is used only for the credentials, address and certificate pin it was opened with (key),
// and only after a fresh read of the system through it succeeds (connect): a session the BMC ended
// (timeout, BMC reboot) is closed and a new one opened, so an expired session is never mistaken for
// rejected credentials.
type bmcSessions struct {
	mu      sync.Mutex
	clients map[types.NamespacedName]keptClient
}

type keptClient struct {
	key    string
	client redfish.Client
}

// sessionKey identifies what a client was opened with; secrets only enter it hashed.
func sessionKey(cfg redfish.Config) string {
	h := sha256.New()
	for _, f := range []string{cfg.Address.Endpoint, cfg.Address.SystemPath, cfg.Username, cfg.Password, strconv.FormatBool(cfg.BasicAuth), cfg.PinnedCertSHA256} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":" + f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// take returns the host's kept client if it was opened with key, ready for reuse; a client opened with
// anything else (changed credentials, address or pin) is closed.
func (p *bmcSessions) take(host types.NamespacedName, key string) redfish.Client {
	p.mu.Lock()
	kept, ok := p.clients[host]
	delete(p.clients, host)
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if kept.key != key {
		kept.client.Close()
		return nil
	}
	kept.client.Reuse()
	return kept.client
}

// put keeps c as the host's client for the next pass.
func (p *bmcSessions) put(host types.NamespacedName, key string, c redfish.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients == nil {
		p.clients = map[types.NamespacedName]keptClient{}
	}
	if old, ok := p.clients[host]; ok && old.client != c {
		old.client.Close()
	}
	p.clients[host] = keptClient{key: key, client: c}
}

// drop closes (logs out) the host's kept client: the host is gone or no longer ours.
func (p *bmcSessions) drop(host types.NamespacedName) {
	p.mu.Lock()
	kept, ok := p.clients[host]
	delete(p.clients, host)
	p.mu.Unlock()
	if ok {
		kept.client.Close()
	}
}

// closeAll logs out of every kept session (the manager stops or loses its lease).
func (p *bmcSessions) closeAll() {
	p.mu.Lock()
	clients := p.clients
	p.clients = nil
	p.mu.Unlock()
	for _, kept := range clients {
		kept.client.Close()
	}
}
