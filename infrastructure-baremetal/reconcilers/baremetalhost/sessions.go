package baremetalhost

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

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
// and only after a fresh read of the system through it succeeds (connect) — or, for the inspecting pass
// that follows registration, once its first request succeeds (keptSessionTrust). A session the BMC ended
// (timeout, BMC reboot) is closed and a new one opened, so an expired session is never mistaken for
// rejected credentials.
type bmcSessions struct {
	mu      sync.Mutex
	clients map[types.NamespacedName]keptClient
}

type keptClient struct {
	key    string
	client redfish.Client
	// provenAt is when a request through the client last succeeded: the BMC honoured its session then.
	provenAt time.Time
}

// sessionKey identifies what a client was opened with; secrets only enter it hashed.
func sessionKey(cfg redfish.Config) string {
	h := sha256.New()
	for _, f := range []string{cfg.Address.Endpoint, cfg.Address.SystemPath, cfg.Username, cfg.Password, strconv.FormatBool(cfg.BasicAuth), cfg.PinnedCertSHA256} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":" + f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// take returns the host's kept client if it was opened with key, ready for reuse, and when it was last
// proven; a client opened with anything else (changed credentials, address or pin) is closed.
func (p *bmcSessions) take(host types.NamespacedName, key string) (redfish.Client, time.Time) {
	p.mu.Lock()
	kept, ok := p.clients[host]
	delete(p.clients, host)
	p.mu.Unlock()
	if !ok {
		return nil, time.Time{}
	}
	if kept.key != key {
		kept.client.Close()
		return nil, time.Time{}
	}
	kept.client.Reuse()
	return kept.client, kept.provenAt
}

// put keeps c, last proven at provenAt, as the host's client for the next pass.
func (p *bmcSessions) put(host types.NamespacedName, key string, c redfish.Client, provenAt time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients == nil {
		p.clients = map[types.NamespacedName]keptClient{}
	}
	if old, ok := p.clients[host]; ok && old.client != c {
		old.client.Close()
	}
	p.clients[host] = keptClient{key: key, client: c, provenAt: provenAt}
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
