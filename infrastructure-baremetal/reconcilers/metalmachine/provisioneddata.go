package metalmachine

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// provisionedDataKey identifies what a host's config drive was made from: the host, the claim that
// provisioned it and the metaData and networkData Secrets its spec named.
type provisionedDataKey struct {
	host                  types.UID
	claim                 types.UID
	metaData, networkData corev1.SecretReference // the zero reference for none
}

// provisionedData keeps, per provisioned host, the addresses and hostname last read from its Secrets
// (Adapter.inventory). One entry per host: a new claim or other Secrets replace it, a released host's is
// dropped.
type provisionedData struct {
	mu    sync.Mutex
	hosts map[types.UID]provisionedEntry
}

type provisionedEntry struct {
	key provisionedDataKey
	inv Inventory
}

func (p *provisionedData) get(key provisionedDataKey) (Inventory, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.hosts[key.host]
	if !ok || e.key != key {
		return Inventory{}, false
	}
	return e.inv, true
}

func (p *provisionedData) put(key provisionedDataKey, inv Inventory) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hosts == nil {
		p.hosts = map[types.UID]provisionedEntry{}
	}
	p.hosts[key.host] = provisionedEntry{key: key, inv: inv}
}

// forget drops host's entry (the host was released).
func (p *provisionedData) forget(host types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.hosts, host)
}
