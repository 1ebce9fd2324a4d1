package claim

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// recentClaimTTL bounds how long a claim is remembered; the cache shows it long before.
const recentClaimTTL = time.Minute

// recentClaim is a claim this replica made that its cache may not show yet.
type recentClaim struct {
	cluster string
	// readVersion is the host's resourceVersion read just before the claim: a cache that still shows
	// it has not seen the claim.
	readVersion string
	at          time.Time
}

// recentClaims remembers the claims this replica made, so that machines created together spread over
// failure domains instead of all choosing from the same stale picture of the inventory. (Across replicas
// spreading is best effort; double claims are prevented by optimistic concurrency, not by this.)
type recentClaims map[client.ObjectKey]recentClaim

// remember records a claim of host h, read at readVersion, by a machine of cluster.
func (r recentClaims) remember(h client.Object, readVersion, cluster string) {
	r[client.ObjectKeyFromObject(h)] = recentClaim{cluster: cluster, readVersion: readVersion, at: time.Now()}
}

// overlay marks the hosts this replica claimed recently as claimed in a cached list that does not show
// the claim yet (the same resourceVersion as read before the claim), and forgets the others.
func overlay[H client.Object](r recentClaims, inv Inventory[H], hosts []H) {
	now := time.Now()
	for k, c := range r {
		if now.Sub(c.at) > recentClaimTTL {
			delete(r, k)
		}
	}
	for _, h := range hosts {
		k := client.ObjectKeyFromObject(h)
		c, ok := r[k]
		if !ok {
			continue
		}
		if h.GetResourceVersion() != c.readVersion {
			delete(r, k)
			continue
		}
		inv.SetConsumer(h, Consumer{Cluster: c.cluster})
	}
}
