package harness

import (
	"net/http"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// CountRequests returns a copy of cfg whose requests are counted in n.
func CountRequests(cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	n := &atomic.Int64{}
	rc := rest.CopyConfig(cfg)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt: rt, n: n} }
	return rc, n
}

type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}
