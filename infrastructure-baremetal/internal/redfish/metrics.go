package redfish

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Operations of yonder_bmc_requests_total and yonder_bmc_request_duration_seconds: what a request does,
// derived from its method and the shape of its path. The label never carries the path itself, whose
// system, session and member IDs (and the BMC's address) would make a series per host and per session.
const (
	OpServiceRoot   = "service_root"
	OpSessionCreate = "session_create"
	OpSessionDelete = "session_delete"
	OpListSystems   = "list_systems"
	OpGetSystem     = "get_system"
	OpBootOverride  = "boot_override"
	OpReset         = "reset"
	OpInventory     = "inventory"
	OpOther         = "other"
)

// Codes of yonder_bmc_requests_total besides the HTTP status (three digits): no response came back.
const (
	// CodeTimeout: the request or its connection timed out (a slow or hung BMC).
	CodeTimeout = "timeout"
	// CodeError: the connection failed otherwise (refused, reset, TLS handshake or certificate pin).
	CodeError = "error"
)

var (
	bmcRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "yonder_bmc_requests_total",
		Help: "Redfish requests sent to BMCs, by operation (service_root, session_create, session_delete, list_systems, get_system, inventory: processors, memory, NICs, storage and PCIe reads, boot_override, reset, other) and code (the HTTP status, or timeout / error when no response came).",
	}, []string{"operation", "code"})
	bmcRequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "yonder_bmc_request_duration_seconds",
		Help: "Time from sending a Redfish request to its response's headers (or its failure), by operation.",
		// 5 ms to 41 s: BMCs answer reads in tens of milliseconds and power actions in seconds.
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"operation"})
)

func init() { metrics.Registry.MustRegister(bmcRequests, bmcRequestSeconds) }

// meteredTransport counts and times every request that reaches the BMC. It sits below the request
// budget, so a request the budget refuses (never sent) is not counted.
type meteredTransport struct{ next http.RoundTripper }

func (t meteredTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	op := operation(r.Method, r.URL.Path)
	start := time.Now()
	rsp, err := t.next.RoundTrip(r)
	bmcRequestSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	bmcRequests.WithLabelValues(op, code(rsp, err)).Inc()
	return rsp, err
}

// code is the code label of a request's outcome.
func code(rsp *http.Response, err error) string {
	var ne net.Error
	switch {
	case err == nil && rsp != nil && rsp.StatusCode >= 100 && rsp.StatusCode <= 999:
		return strconv.Itoa(rsp.StatusCode)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return CodeTimeout
	default:
		return CodeError
	}
}

// operation names what a request does from its method and path (the URL's path: no query, no host).
// Paths follow the Redfish resource tree (/redfish/v1/Systems/<id>/Processors/<id> and so on).
func operation(method, path string) string {
	p := strings.Trim(path, "/")
	if p == "redfish" || strings.EqualFold(p, "redfish/v1") {
		return OpServiceRoot
	}
	rest, ok := cutPrefixFold(p, "redfish/v1/")
	if !ok {
		return OpOther
	}
	parts := strings.Split(rest, "/")
	switch {
	case strings.EqualFold(parts[0], "SessionService"):
		return sessionOperation(method, parts)
	case strings.EqualFold(parts[0], "Systems"):
		return systemOperation(method, parts)
	case strings.EqualFold(parts[0], "Chassis") && method == http.MethodGet:
		// PCIe devices and network adapters may live under the chassis: read by inspection.
		return OpInventory
	}
	return OpOther
}

func sessionOperation(method string, parts []string) string {
	if len(parts) < 2 || !strings.EqualFold(parts[1], "Sessions") {
		return OpOther
	}
	switch {
	case len(parts) == 2 && method == http.MethodPost:
		return OpSessionCreate
	case len(parts) == 3 && method == http.MethodDelete:
		return OpSessionDelete
	}
	return OpOther
}

func systemOperation(method string, parts []string) string {
	switch {
	case len(parts) == 1 && method == http.MethodGet:
		return OpListSystems
	case len(parts) == 2 && method == http.MethodGet:
		return OpGetSystem
	case len(parts) == 2 && method == http.MethodPatch:
		// The only PATCH of a system the client sends: BootSourceOverrideTarget/Enabled.
		return OpBootOverride
	case len(parts) == 4 && method == http.MethodPost && strings.EqualFold(parts[2], "Actions") &&
		strings.EqualFold(parts[3], "ComputerSystem.Reset"):
		return OpReset
	case len(parts) > 2 && method == http.MethodGet:
		return OpInventory
	}
	return OpOther
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}
