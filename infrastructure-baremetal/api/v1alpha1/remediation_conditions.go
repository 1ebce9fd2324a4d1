package v1alpha1

// YonderMetalRemediation conditions.
const (
	// YonderMetalRemediationHostPowerCycledCondition is true once the current attempt's power cycle is done
	// (the host was seen off and let power on again); false while it is under way.
	YonderMetalRemediationHostPowerCycledCondition = "HostPowerCycled"
	// YonderMetalRemediationMachineReplacementRequestedCondition is true once the Machine was handed to its
	// owner (MachineSet) for deletion and replacement.
	YonderMetalRemediationMachineReplacementRequestedCondition = "MachineReplacementRequested"
)

// YonderMetalRemediation condition reasons (also used on the Machine's ExternallyRemediated condition).
const (
	// YonderMetalRemediationWaitingForMachineReason: the remediation has no owner Machine yet (the
	// MachineHealthCheck sets it at creation).
	YonderMetalRemediationWaitingForMachineReason = "WaitingForMachine"
	// YonderMetalRemediationPoweringOffReason: the host carries the attempt's reboot annotation and is
	// being powered off by its host controller.
	YonderMetalRemediationPoweringOffReason = "PoweringOff"
	// YonderMetalRemediationPowerOffTimedOutReason: the host was not seen powered off within
	// spec.strategy.timeout of the request; the annotation was removed and the attempt counted.
	YonderMetalRemediationPowerOffTimedOutReason = "PowerOffTimedOut"
	// YonderMetalRemediationPowerCycledReason: the host was powered off and let power on again.
	YonderMetalRemediationPowerCycledReason = "PowerCycled"
	// YonderMetalRemediationWaitingForNodeReason: after a power cycle, waiting for the Node to be healthy.
	YonderMetalRemediationWaitingForNodeReason = "WaitingForNode"
	// YonderMetalRemediationRetriesExhaustedReason: retryLimit power cycles did not bring the Node back.
	YonderMetalRemediationRetriesExhaustedReason = "RetriesExhausted"
	// YonderMetalRemediationNoHostReason: the Machine has no claimed, provisioned BareMetalHost to
	// power-cycle (not provisioned yet, or its host is gone); it is replaced straight away.
	YonderMetalRemediationNoHostReason = "NoHost"
	// YonderMetalRemediationDisklessHostReason: the Machine runs diskless (customDeploy yonder-diskless):
	// its Node lived in the host's memory and no power cycle brings it back (the bootstrap token was
	// single-use, and the boot server serves a provisioned host no boot script); it is replaced straight away.
	YonderMetalRemediationDisklessHostReason = "DisklessHost"
	// YonderMetalRemediationPowerOffDisabledReason: the host has spec.disablePowerOff, so a keyed reboot
	// annotation cannot power-cycle it; the Machine is replaced straight away.
	YonderMetalRemediationPowerOffDisabledReason = "PowerOffDisabled"
	// YonderMetalRemediationReplacementRequestedReason: the Machine's OwnerRemediated condition is False;
	// its MachineSet deletes and replaces it.
	YonderMetalRemediationReplacementRequestedReason = "ReplacementRequested"
	// YonderMetalRemediationNoOwnerReason: the Machine is not owned by a controller (MachineSet or control
	// plane) that replaces Machines marked OwnerRemediated=False; delete the Machine by hand.
	YonderMetalRemediationNoOwnerReason = "MachineHasNoOwner"
	// YonderMetalRemediationUnsupportedMachineReason: the Machine's infrastructure is not a
	// YonderMetalMachine; use that provider's remediation.
	YonderMetalRemediationUnsupportedMachineReason = "UnsupportedMachine"
)
