// Package hostdata reads what a BareMetalHost's inventory record says about the host beyond its BMC: the
// Secrets its spec.metaData and spec.networkData name (Metal3's fields, what CAPM3's Metal3Data renders),
// for the config drive the BareMetalHost controller writes and for the addresses and hostname a
// YonderMetalMachine reports on its Machine.
package hostdata

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Keys of the data Secrets, as Metal3 names them.
const (
	MetaDataKey    = "metaData"
	NetworkDataKey = "networkData"
)

// SecretKey returns the first of keys in the Secret ref names (in the host's namespace); nil when ref
// names none. field names the reference in errors (e.g. "spec.networkData").
func SecretKey(ctx context.Context, r client.Reader, h *metal3v1.BareMetalHost, ref *corev1.SecretReference, field string, keys ...string) ([]byte, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	if ref.Namespace != "" && ref.Namespace != h.Namespace {
		return nil, fmt.Errorf("%s names Secret %s/%s in another namespace than the host's", field, ref.Namespace, ref.Name)
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: ref.Name}, sec); err != nil {
		return nil, fmt.Errorf("failed to get the %s Secret of %s/%s: %w", field, h.Namespace, h.Name, err)
	}
	for _, k := range keys {
		if v, ok := sec.Data[k]; ok {
			return v, nil
		}
	}
	return nil, fmt.Errorf("the %s Secret %s/%s has none of the keys %s", field, h.Namespace, sec.Name, strings.Join(keys, ", "))
}

// MetaData returns the host's spec.metaData Secret's metaData as a map; nil when the host names none.
func MetaData(ctx context.Context, r client.Reader, h *metal3v1.BareMetalHost) (map[string]any, error) {
	raw, err := SecretKey(ctx, r, h, h.Spec.MetaData, "spec.metaData", MetaDataKey)
	if err != nil || raw == nil {
		return nil, err
	}
	md := map[string]any{}
	if err := yaml.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("the spec.metaData Secret of %s/%s: key %s is not a YAML or JSON map: %w", h.Namespace, h.Name, MetaDataKey, err)
	}
	return md, nil
}

// NetworkData returns the host's spec.networkData Secret's networkData (YAML or JSON, OpenStack's
// network_data format) as JSON; nil when the host names none.
func NetworkData(ctx context.Context, r client.Reader, h *metal3v1.BareMetalHost) ([]byte, error) {
	raw, err := SecretKey(ctx, r, h, h.Spec.NetworkData, "spec.networkData", NetworkDataKey)
	if err != nil || raw == nil {
		return nil, err
	}
	out, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("the spec.networkData Secret of %s/%s: key %s is not YAML or JSON: %w", h.Namespace, h.Name, NetworkDataKey, err)
	}
	return out, nil
}

// Hostname is the hostname a metaData map gives the host's OS: cloud-init's ConfigDrive and OpenStack
// datasources take meta_data.json's "hostname" ("" when the map names none).
func Hostname(md map[string]any) string {
	s, _ := md["hostname"].(string)
	return strings.TrimSpace(s)
}

// StaticAddresses returns the static addresses of OpenStack network_data (JSON): every "ipv4" or "ipv6"
// network's ip_address, in order, without duplicates. DHCP and SLAAC networks have none here: those
// addresses are known only from a lease.
func StaticAddresses(networkData []byte) ([]netip.Addr, error) {
	var nd struct {
		Networks []struct {
			Type      string `json:"type"`
			IPAddress string `json:"ip_address"`
		} `json:"networks"`
	}
	if err := yaml.Unmarshal(networkData, &nd); err != nil {
		return nil, fmt.Errorf("network data is not OpenStack's network_data format: %w", err)
	}
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for i, n := range nd.Networks {
		if (n.Type != "ipv4" && n.Type != "ipv6") || n.IPAddress == "" {
			continue
		}
		a, err := netip.ParseAddr(n.IPAddress)
		if err != nil {
			// CAPM3 writes a bare address with a netmask; a CIDR is accepted as cloud-init accepts it.
			p, perr := netip.ParsePrefix(n.IPAddress)
			if perr != nil {
				return nil, fmt.Errorf("networks[%d].ip_address %q is not an IP address", i, n.IPAddress)
			}
			a = p.Addr()
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}
