package imagechecksum

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Get starts a GET of an image or checksum file URL and returns its body and Content-Length (-1 when
// unknown). Any status but 200 is an error. Errors name the URL redacted (RedactString): the
// *url.Error the client returns repeats the whole URL, query included, so only its cause is kept.
// c nil means http.DefaultClient.
func Get(ctx context.Context, c *http.Client, rawURL string) (io.ReadCloser, int64, error) {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to download %s: not a valid URL", RedactString(rawURL))
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, 0, fmt.Errorf("failed to download %s: %w", RedactString(rawURL), err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, 0, fmt.Errorf("failed to download %s: HTTP %s", RedactString(rawURL), resp.Status)
	}
	return resp.Body, resp.ContentLength, nil
}

// RedactURL drops user info and the query (pre-signed URLs carry credentials there) before a URL is
// put in an error or a message that ends up in a condition or a log.
func RedactURL(u *url.URL) string {
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		c.RawQuery = "REDACTED"
	}
	return c.String()
}

// RedactString is RedactURL for a URL not parsed yet; an unparsable one is not repeated at all.
func RedactString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return RedactURL(u)
}
