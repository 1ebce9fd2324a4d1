package baremetalhost

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// settledHosts remembers, per host, the resourceVersion at which a pass last found the host's power
// settled (available or provisioned, as spec.online and the reboot annotations want it) and wrote
// nothing, and when its next power poll is due. A host is often reconciled twice at one version: the
// informer updates its cache before it queues the update's event, so a pass already woken by an earlier
// event reads the new version, and the new version's own event runs another pass after it (1.2 % of the
// hosts in BenchmarkRegisterInspectHosts at 1,000). That pass, and any other before the poll is due at
// a version that changed nothing since, would only read the system from the BMC again. It is a memo of
// this controller's own last look: a restarted controller starts without it and reads the BMC, and any
// change of the host (spec, annotations, status) is a new version and a full pass.
type settledHosts struct {
	mu    sync.Mutex
	hosts map[types.NamespacedName]settledAt
}

type settledAt struct {
	version string
	due     time.Time
}

// record notes that host, at version, is settled until due (its next power poll).
func (s *settledHosts) record(host types.NamespacedName, version string, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = map[types.NamespacedName]settledAt{}
	}
	s.hosts[host] = settledAt{version: version, due: due}
}

// wait returns how long host, read at version, stays settled: 0 when it is not (another version, nothing
// recorded, or the poll is due).
func (s *settledHosts) wait(host types.NamespacedName, version string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.hosts[host]
	if !ok || at.version != version {
		return 0
	}
	return max(0, time.Until(at.due))
}

// forget drops host's record (the host is gone, or a pass did something else with it).
func (s *settledHosts) forget(host types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.hosts, host)
}
