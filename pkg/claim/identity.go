package claim

import (
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ID returns the identity machine m claims hosts under: the UID m had when it first reserved a host,
// kept in the claim-id annotation key, or its current UID before that. `clusterctl move` recreates every
// object with a new UID but keeps its name and annotations, so a moved machine still recognises its claim
// on the host (and any record a provider keeps on the host under the same identity) instead of seeing a
// lost claim, or claiming and provisioning a second host.
//
// The annotation is written in one place only (the reservation, before the claim reaches the host), and
// a claim matches a machine only under both its name and this identity (Owns): a webhook that keeps the
// annotation from being set or changed by anyone but the controller needs no other cooperation.
func ID(m client.Object, key string) types.UID {
	if id := m.GetAnnotations()[key]; id != "" {
		return types.UID(id)
	}
	return m.GetUID()
}

// Owns reports whether the claim c on a host belongs to the machine named name with claim identity id. A
// claim recorded without a name (a consumer label alone) matches by identity.
func (c *Consumer) Owns(name string, id types.UID) bool {
	return c != nil && c.ID == id && (c.Name == "" || c.Name == name)
}

// HeldBy reports whether inv records machine m (claim identity key idKey) as the consumer of h.
func HeldBy[H client.Object](inv Inventory[H], h H, m client.Object, idKey string) bool {
	return inv.ConsumerOf(h).Owns(m.GetName(), ID(m, idKey))
}
