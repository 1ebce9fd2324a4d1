// Package admission holds the defaulting and validating webhooks of YonderControlPlane and
// YonderControlPlaneTemplate.
package admission
