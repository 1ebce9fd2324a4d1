package claim

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
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

// IdentityChange checks an update of machine cur's claim identity (annotation key) from old. Only the
// controller records it, once, when the machine first reserves a host, and then always as the machine's
// own UID: a value that names any other identity, or a change or removal of a recorded one, would let the
// machine adopt another machine's host (and the records kept on it), so it is refused.
//
// The one removal allowed is clusterctl move's: after creating the moved objects in the target it
// replaces the source object's whole annotation map with its delete-for-move marker (a JSON patch of
// /metadata/annotations) and deletes the object. A machine without the annotation claims under its own
// UID, which no host other than its own can record, so the removal adopts nothing.
func IdentityChange(old, cur client.Object, key string) field.ErrorList {
	p := field.NewPath("metadata", "annotations").Key(key)
	was, now := old.GetAnnotations()[key], cur.GetAnnotations()[key]
	_, deleteForMove := cur.GetAnnotations()[clusterctlv1.DeleteForMoveAnnotation]
	switch {
	case was != "" && now == "" && deleteForMove:
		return nil
	case was != "" && now != was:
		return field.ErrorList{field.Forbidden(p, fmt.Sprintf("the claim identity %s is recorded by the controller and cannot be changed or removed", was))}
	case was == "" && now != "" && now != string(cur.GetUID()):
		return field.ErrorList{field.Forbidden(p, "the claim identity is recorded by the controller as the object's own UID "+string(cur.GetUID())+"; it cannot name another identity")}
	}
	return nil
}

// IdentityOnCreate checks the claim identity (annotation key) a machine m is created with. Only
// `clusterctl move` creates a machine with one: the moved object keeps its name and annotations, and the
// host it holds, moved before it, still records the claim under that name and identity. Any other value
// (copied from another machine, or from a template) would adopt a host that is not m's, so it is refused
// unless one of hosts (the namespace's hosts, read uncached) records m's name with that identity.
func IdentityOnCreate[H client.Object](inv Inventory[H], m client.Object, key string, hosts []H) field.ErrorList {
	id := m.GetAnnotations()[key]
	if id == "" {
		return nil
	}
	for _, h := range hosts {
		if c := inv.ConsumerOf(h); c != nil && c.Name == m.GetName() && c.ID == types.UID(id) {
			return nil
		}
	}
	return field.ErrorList{field.Forbidden(field.NewPath("metadata", "annotations").Key(key),
		fmt.Sprintf("no %s in namespace %s records a claim by %s under identity %s; the claim identity is recorded by the controller (and carried by clusterctl move), remove the annotation",
			inv.HostKind(), m.GetNamespace(), m.GetName(), id))}
}
