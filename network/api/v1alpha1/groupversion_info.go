// Package v1alpha1 is the network.yonder.dev/v1alpha1 API of Yonder's multi-site networking add-on:
// what operators write (Site, GatewayPool, SitePeering), what the node daemon publishes (NodeNetwork)
// and what the controller publishes for the daemons (RoutePlan, PeerSlice).
// +kubebuilder:object:generate=true
// +groupName=network.yonder.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "network.yonder.dev", Version: "v1alpha1"}

	// schemeBuilder collects the registration functions; apimachinery's builder keeps this package free
	// of controller-runtime so the node daemon and CLI can import it cheaply.
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Site{}, &SiteList{},
		&GatewayPool{}, &GatewayPoolList{},
		&SitePeering{}, &SitePeeringList{},
		&NodeNetwork{}, &NodeNetworkList{},
		&RoutePlan{}, &RoutePlanList{},
		&PeerSlice{}, &PeerSliceList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
