package baremetalhost

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ownWrites remembers, per host, the resourceVersions the controller's own last writes replaced. A pass
// writes a host in two patches (metadata, then status); the watch event of the first can start the next
// pass before the informer has the second, and that pass would redo BMC work (a whole inspection: a dozen
// Redfish requests) only to lose its write on the optimistic lock. A pass that reads a version its
// predecessor already replaced waits for the newer one instead. Versions are compared only for equality,
// as the API's resourceVersion contract allows, and a record is trusted only for ownWritesTTL: should the
// newer version never arrive, the controller goes on with what it has rather than wait forever.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]replacedVersions
}

type replacedVersions struct {
	versions []string
	at       time.Time
}

// ownWritesTTL bounds how long a replaced version is held back: the watch delivers a write in
// milliseconds on a healthy API server.
const ownWritesTTL = 10 * time.Second

// wrote records that a write of host turned version from into version to. A write that changed nothing
// (the API server keeps the version of a no-op patch) replaced nothing.
func (o *ownWrites) wrote(host types.NamespacedName, from, to string) {
	if from == "" || from == to {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.replaced == nil {
		o.replaced = map[types.NamespacedName]replacedVersions{}
	}
	r := o.replaced[host]
	o.replaced[host] = replacedVersions{versions: append(r.versions, from), at: time.Now()}
}

// outdated reports whether rv is a version of host that the controller's last pass replaced.
func (o *ownWrites) outdated(host types.NamespacedName, rv string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.replaced[host]
	if !ok || time.Since(r.at) > ownWritesTTL {
		return false
	}
	for _, v := range r.versions {
		if v == rv {
			return true
		}
	}
	return false
}

// start begins a pass over host with a current version: the versions older passes replaced are forgotten.
func (o *ownWrites) start(host types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.replaced, host)
}
