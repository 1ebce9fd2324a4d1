// Package managercache holds the cache and client options every Yonder provider manager uses in the
// management cluster: Secrets are cached only when they carry a cluster name (CAPI's
// "<cluster>-kubeconfig", data Secrets, Secrets a provider labelled for watching), never every Secret of
// the cluster, and the manager's client reads Secrets live so an unlabelled Secret is still found.
package managercache

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// CacheOptions returns the manager's cache options; watchNamespace "" means all namespaces.
func CacheOptions(watchNamespace string, syncPeriod time.Duration) ctrlcache.Options {
	req, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	o := ctrlcache.Options{
		SyncPeriod: &syncPeriod,
		ByObject:   map[client.Object]ctrlcache.ByObject{&corev1.Secret{}: {Label: labels.NewSelector().Add(*req)}},
	}
	if watchNamespace != "" {
		o.DefaultNamespaces = map[string]ctrlcache.Config{watchNamespace: {}}
	}
	return o
}

// ClientOptions returns the manager's client options: Secrets are always read from the API server.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}
