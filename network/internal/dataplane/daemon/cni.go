package daemon

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// WriteCNIConfig writes a CNI conflist for the node's pod CIDRs: the bridge plugin on the pod bridge (the node
// is the pods' gateway, no IP masquerade: pod traffic to other sites keeps pod addresses) and host-local IPAM.
// The file is only rewritten when its content changes.
func WriteCNIConfig(dir, bridge string, podCIDRs []string, mtu int) error {
	var ranges [][]map[string]string
	for _, c := range podCIDRs {
		ranges = append(ranges, []map[string]string{podRange(c, podCIDRs)})
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "yonder",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false, "mtu": mtu, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "ranges": ranges, "routes": []map[string]string{{"dst": "0.0.0.0/0"}}},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to encode CNI config: %w", err)
	}
	path := filepath.Clean(filepath.Join(dir, "10-yonder.conflist"))
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // CNI config directories are world-readable by convention
		return fmt.Errorf("failed to create CNI config directory %s: %w", dir, err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil { //nolint:gosec // kubelet and the CNI plugins read it; no secrets
		return fmt.Errorf("failed to write CNI config: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("failed to write CNI config: %w", err)
	}
	return nil
}

// podRange is host-local's range for pod CIDR c. In the tunnel prefix it ends before the node's WireGuard
// slot-1 address (desired.SlotAddr), so no pod is ever given the address the node puts on its WireGuard
// device during a key rotation; host-local's defaults keep the network address (slot 0), the gateway and
// the broadcast address out already.
func podRange(c string, podCIDRs []string) map[string]string {
	r := map[string]string{"subnet": c}
	t, ok := desired.TunnelPrefix(podCIDRs)
	if p, err := netip.ParsePrefix(c); err != nil || !ok || p.Masked() != t {
		return r
	}
	if s1, err := desired.SlotAddr(t, 1); err == nil {
		r["rangeEnd"] = s1.Prev().String()
	}
	return r
}
