// Package admission holds the defaulting and validating webhooks of YonderConfig and
// YonderConfigTemplate.
package admission
