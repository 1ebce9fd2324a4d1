package metalmachine

import (
	"k8s.io/apimachinery/pkg/api/equality"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
)

func equalSpec(a, b *metal3v1.BareMetalHostSpec) bool { return equality.Semantic.DeepEqual(a, b) }
