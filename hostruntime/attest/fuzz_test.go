package attest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/yonder-dev/yonder/hostruntime/attest"
	"github.com/yonder-dev/yonder/hostruntime/attest/swtpm"
)

// FuzzAgentResponses is the agent's side of attestation against a boot server that answers anything (a
// rogue server on the boot LAN, or a broken one): every response status and body of start, verify and
// bootstrap goes through the client's decoding, and whatever decodes goes to a real TPM (credential
// activation, PCR quote, envelope opening). Nothing may panic, and nothing may "decrypt": the fuzzed
// envelope is not sealed to this TPM.
func FuzzAgentResponses(f *testing.F) {
	start, _ := json.Marshal(attest.StartResponse{Session: "s", CredentialBlob: []byte{0, 4, 1, 2, 3, 4}, EncryptedSecret: []byte{0, 2, 9, 9},
		Nonce: make([]byte, 32), PCRs: []int{0, 7}})
	env, _ := json.Marshal(attest.Envelope{CredentialBlob: []byte{0, 1, 0}, EncryptedSecret: []byte{0, 1, 0}, Nonce: make([]byte, 12), Ciphertext: []byte("x")})
	for _, seed := range []struct {
		code int
		body []byte
	}{
		{200, start}, {200, env}, {200, []byte(`{"releaseToken":"t"}`)}, {403, []byte(`{"reason":"EKMismatch","message":"m"}`)},
		{500, []byte("<html>")}, {200, []byte(`{"pcrs":[-1,99,1000000]}`)}, {200, []byte(`{"nonce":"` + string(make([]byte, 0)) + `"}`)}, {200, []byte(`[`)},
	} {
		f.Add(seed.code, seed.body)
	}
	dir, err := os.MkdirTemp("", "yswtpm-fz-")
	if err != nil {
		f.Fatal(err)
	}
	sw, err := swtpm.Start(context.Background(), dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = sw.Stop(); _ = os.RemoveAll(dir) })
	conn, err := attest.OpenTPM(sw.Socket)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = conn.Close() })
	keys, err := attest.LoadKeys(conn)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = keys.Close() })
	var code int
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write(body)
	}))
	f.Cleanup(srv.Close)
	// No waiting on a fuzzed 429: the budget is spent before the first Retry-After.
	c := &attest.Client{Server: srv.URL, HTTP: srv.Client(), RetryBudget: time.Nanosecond}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, status int, data []byte) {
		if status < 200 || status > 599 {
			status = 200 + (status%400+400)%400
		}
		code, body = status, data
		if ch, err := c.Start(ctx, "ticket", keys); err == nil {
			_, _ = attest.Answer(keys, ch)
		}
		_, _ = c.Verify(ctx, &attest.VerifyRequest{Session: "s"})
		_, _ = c.Fetch(ctx, "token", make([]byte, attest.AgentNonceSize))
		// Opening is tried on whatever decodes, even where Fetch refused it (unsigned, another session's).
		var e attest.Envelope
		if json.Unmarshal(data, &e) == nil {
			if plain, err := keys.Open(&e); err == nil {
				t.Fatalf("an envelope this TPM never received opened: %q", plain)
			}
		}
		_, _ = attest.ParseCmdline(string(data))
	})
}
