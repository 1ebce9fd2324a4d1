package kubeletserving

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// NodeName returns the node a kubelet-serving CSR was requested by ("" if the requester is no node).
func NodeName(csr *certificatesv1.CertificateSigningRequest) string {
	if !strings.HasPrefix(csr.Spec.Username, nodeUserPrefix) {
		return ""
	}
	return strings.TrimPrefix(csr.Spec.Username, nodeUserPrefix)
}

// IsPendingServing is true for kubelet-serving CSRs nobody approved, denied or failed yet.
func IsPendingServing(csr *certificatesv1.CertificateSigningRequest) bool {
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return false
	}
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return false
		}
	}
	return true
}

// Check decides whether a kubelet-serving CSR may be approved for machine, the Machine whose Node the
// requester is, in cluster. It returns nil when the CSR is exactly what that kubelet should ask for:
// requested by the node's own identity, subject system:node:<name>/system:nodes, server-auth usages
// only, every DNS name the node's name or one of the Machine's DNS addresses and every IP address one of
// its IP addresses — the addresses the infrastructure provider recorded for the Machine, never what the
// host or kubelet says about itself — and none of them a name or address of the cluster's services
// (kubernetes.default.svc…, the service CIDRs). Anything else is an error saying why.
func Check(csr *certificatesv1.CertificateSigningRequest, machine *clusterv1.Machine, cluster *clusterv1.Cluster) error {
	node := machine.Status.NodeRef.Name
	if csr.Spec.Username != nodeUserPrefix+node {
		return fmt.Errorf("requested by %q, not by node %s", csr.Spec.Username, node)
	}
	if !slices.Contains(csr.Spec.Groups, nodesGroup) {
		return fmt.Errorf("requester is not in group %s", nodesGroup)
	}
	serverAuth := false
	for _, u := range csr.Spec.Usages {
		switch u {
		case certificatesv1.UsageServerAuth:
			serverAuth = true
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment:
		default:
			return fmt.Errorf("usage %q is not allowed for a kubelet serving certificate", u)
		}
	}
	if !serverAuth {
		return fmt.Errorf("usages lack %q", certificatesv1.UsageServerAuth)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return fmt.Errorf("request is not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return fmt.Errorf("request does not parse: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return fmt.Errorf("request signature is invalid: %w", err)
	}
	if req.Subject.CommonName != nodeUserPrefix+node {
		return fmt.Errorf("subject common name %q is not %s%s", req.Subject.CommonName, nodeUserPrefix, node)
	}
	if len(req.Subject.Organization) != 1 || req.Subject.Organization[0] != nodesGroup {
		return fmt.Errorf("subject organization %v is not [%s]", req.Subject.Organization, nodesGroup)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return fmt.Errorf("email and URI names are not allowed")
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return fmt.Errorf("request names no DNS name or IP address")
	}
	if err := checkNotServices(req, cluster); err != nil {
		return err
	}
	// The node's name is bound to the requester (checked above): no other node can ask for it.
	dnsOK, ipOK := map[string]bool{strings.ToLower(node): true}, map[string]bool{}
	for _, a := range machine.Status.Addresses {
		switch a.Type {
		case clusterv1.MachineHostName, clusterv1.MachineInternalDNS, clusterv1.MachineExternalDNS:
			dnsOK[strings.ToLower(a.Address)] = true
		case clusterv1.MachineInternalIP, clusterv1.MachineExternalIP:
			if ip := net.ParseIP(a.Address); ip != nil {
				ipOK[ip.String()] = true
			}
		}
	}
	for _, d := range req.DNSNames {
		if !dnsOK[strings.ToLower(d)] {
			return fmt.Errorf("DNS name %q is not an address of Machine %s", d, machine.Name)
		}
	}
	for _, ip := range req.IPAddresses {
		if !ipOK[ip.String()] {
			return fmt.Errorf("IP address %s is not an address of Machine %s", ip, machine.Name)
		}
	}
	return nil
}

// checkNotServices refuses names and addresses that belong to the cluster's services: the API server's
// service names (kubernetes, kubernetes.default, kubernetes.default.svc, …), any in-cluster service DNS
// name (<service>.<namespace>.svc[.<domain>], names under the Cluster's service domain), wildcards, and
// IPs in the Cluster's service CIDRs, loopback or unspecified. A node holding such a certificate could
// impersonate those services to every client that trusts the kubelet-serving signer.
func checkNotServices(req *x509.CertificateRequest, cluster *clusterv1.Cluster) error {
	domain := strings.ToLower(strings.TrimSuffix(cluster.Spec.ClusterNetwork.ServiceDomain, "."))
	if domain == "" {
		domain = "cluster.local"
	}
	for _, d := range req.DNSNames {
		n := strings.TrimSuffix(strings.ToLower(d), ".")
		if n == "kubernetes" || n == "kubernetes.default" || strings.HasPrefix(n, "kubernetes.default.") ||
			strings.HasSuffix(n, ".svc") || strings.Contains(n, ".svc.") || n == domain || strings.HasSuffix(n, "."+domain) || strings.Contains(n, "*") {
			return fmt.Errorf("DNS name %q is a cluster service name", d)
		}
	}
	var cidrs []*net.IPNet
	for _, c := range cluster.Spec.ClusterNetwork.Services.CIDRBlocks {
		if _, n, err := net.ParseCIDR(c); err == nil {
			cidrs = append(cidrs, n)
		}
	}
	for _, ip := range req.IPAddresses {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return fmt.Errorf("IP address %s is loopback or unspecified", ip)
		}
		for _, n := range cidrs {
			if n.Contains(ip) {
				return fmt.Errorf("IP address %s is in the cluster's service CIDR %s", ip, n)
			}
		}
	}
	return nil
}
