package attest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/hostruntime/attest"
)

// The agent waits a 429's Retry-After and sends the same request again, until its budget is spent; any
// other refusal is returned at once. (The real server's limiter is exercised in the provider's
// attestation tests; this server is the simplest peer that answers 429.)
func TestClientWaitsOutRateLimits(t *testing.T) {
	g := NewWithT(t)
	var calls atomic.Int32
	var limitFor atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path != attest.PathVerify:
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"reason":"UnknownSession","message":"m"}`))
		case n <= limitFor.Load():
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"reason":"RateLimited","message":"slow down"}`))
		default:
			_, _ = w.Write([]byte(`{"releaseToken":"tok"}`))
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()

	limitFor.Store(2)
	c := &attest.Client{Server: srv.URL, HTTP: srv.Client()}
	began := time.Now()
	token, err := c.Verify(ctx, &attest.VerifyRequest{Session: "s"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(token).To(Equal("tok"))
	g.Expect(calls.Load()).To(Equal(int32(3)))
	g.Expect(time.Since(began)).To(BeNumerically(">=", 2*time.Second))

	calls.Store(0)
	limitFor.Store(100)
	c.RetryBudget = 2 * time.Second
	_, err = c.Verify(ctx, &attest.VerifyRequest{Session: "s"})
	var re *attest.RefusedError
	g.Expect(errors.As(err, &re)).To(BeTrue())
	g.Expect(re.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(calls.Load()).To(Equal(int32(3)), "two waits of 1 s fit the budget, a third does not")

	calls.Store(0)
	_, err = c.Fetch(ctx, "tok", make([]byte, attest.AgentNonceSize))
	g.Expect(errors.As(err, &re)).To(BeTrue())
	g.Expect(re.Reason).To(Equal("UnknownSession"))
	g.Expect(calls.Load()).To(Equal(int32(1)), "no retry of other refusals")

	ctxDone, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	calls.Store(0)
	c.RetryBudget = time.Minute
	_, err = c.Verify(ctxDone, &attest.VerifyRequest{Session: "s"})
	g.Expect(err).To(MatchError(context.DeadlineExceeded))
}
