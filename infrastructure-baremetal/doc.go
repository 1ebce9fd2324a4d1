// Package infrastructurebaremetal is the root of Yonder's bare-metal provider (clusterctl name
// infrastructure-yonder-metal, binary yonder-metal-manager): Metal3 BareMetalHost inventory reconciled
// without Ironic (Redfish, PXE services, TPM attestation) and YonderMetalMachines that claim hosts.
// Layout: STYLE.md.
package infrastructurebaremetal
