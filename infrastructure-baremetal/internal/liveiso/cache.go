// Package liveiso keeps the live ISOs that BareMetalHosts boot (spec.image with format live-iso) in a
// local cache that the boot server serves to hosts, whose iPXE sanboot reads an ISO over HTTP with Range
// requests. Each ISO is fetched once from the user's image server and verified against the image's
// checksum before it can be served, so hosts on the boot network never reach the image server and never
// boot bytes that failed verification. An image without a checksum is served as fetched (State.Verified
// is false). The cache is keyed by the image's url, checksumType and checksum: the same URL with a
// changed checksum is a new image; the same URL and checksum is never fetched twice while it is kept.
package liveiso

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/pkg/imagechecksum"
)

const (
	// DefaultMaxBytes is the largest ISO fetched when Cache.MaxBytes is 0.
	DefaultMaxBytes int64 = 16 << 30
	// DefaultStallTimeout is how long a fetch waits for the next byte when Cache.StallTimeout is 0.
	DefaultStallTimeout = 2 * time.Minute
	// PathPrefix is where Handler serves the cached ISOs: PathPrefix + "<key>.iso".
	PathPrefix = "/live/"

	firstRetry = 30 * time.Second
	maxRetry   = 10 * time.Minute
)

// Phase is where an image stands in the cache.
type Phase string

const (
	// Fetching means the ISO is being downloaded and verified, or a cached copy found at start is being read.
	Fetching Phase = "Fetching"
	// Ready means the ISO is served at State.Path.
	Ready Phase = "Ready"
	// Failed means the last fetch failed; State.Message says why and State.RetryAt when the next Ensure tries
	// again.
	Failed Phase = "Failed"
)

// State is what Ensure reports for an image.
type State struct {
	Phase Phase
	// Path is where Handler serves the ISO, PathPrefix + "<key>.iso"; set when Ready.
	Path string
	// Size and SHA256 (lower-case hex) describe the cached file; set when Ready.
	Size   int64
	SHA256 string
	// Verified is true when the ISO matched the image's checksum; false for an image without one,
	// which is served as fetched.
	Verified bool
	// Message says why a fetch failed (Failed), how far it is (Fetching), or that a Ready ISO was not
	// verified. URLs in it carry no user info and no query string.
	Message string
	// RetryAt is when the next Ensure of a Failed image starts a new fetch; zero when retrying cannot
	// help because the image itself is refused (a URL that is not http(s), a malformed checksum), so
	// only a changed spec.image can.
	RetryAt time.Time
}

// Cache fetches the live ISOs that BareMetalHosts name once, verifies them, and serves them to hosts.
// Files live in one directory: "<key>.iso" for a verified ISO (renamed there only after verification,
// so a file under that name is whole and verified) and ".<key>.<n>.partial" while one is fetched.
type Cache struct {
	// MaxBytes is the largest ISO fetched (0: DefaultMaxBytes); set it before the first Ensure.
	MaxBytes int64
	// StallTimeout fails a fetch when the image server sends nothing for that long (0:
	// DefaultStallTimeout), so a hung server shows as Failed and is retried rather than Fetching forever.
	StallTimeout time.Duration

	root   *os.Root
	client *http.Client
	log    logr.Logger
	now    func() time.Time // RetryAt's clock; tests replace it

	ctx    context.Context // parent of every fetch; Close cancels it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Uint64 // makes partial file names unique, so a dropped fetch never meets its successor's

	mu      sync.Mutex
	closed  bool
	entries map[string]*entry // by key
}

// entry is one image's state; the fetch or check goroutine that owns it finishes only while it is still
// the map's entry for its key (Keep may have dropped it).
type entry struct {
	key      string
	url      string // redacted; "" for a file adopted at start until its first Ensure
	phase    Phase
	size     int64
	sha256   string
	message  string
	retryAt  time.Time
	failures int
	cancel   context.CancelFunc // of the running fetch or check
	progress *progress          // of the running fetch or check
}

// progress counts the bytes a running fetch or check has handled, for State.Message.
type progress struct {
	verb  string
	done  atomic.Int64
	total atomic.Int64 // -1 while unknown
}

func (p *progress) Write(b []byte) (int, error) {
	p.done.Add(int64(len(b)))
	return len(b), nil
}

// New opens (creating it 0700 if missing) the cache directory dir, removes the partial files an
// interrupted fetch left, and adopts the "<key>.iso" files already there: each is read once in the
// background for its size and SHA256 and is Ready from then on. client fetches images and checksum
// files (nil: http.DefaultClient); give it transport timeouts, not a total one, which would cut off a
// large ISO.
func New(dir string, client *http.Client, log logr.Logger) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create live ISO cache directory %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to open live ISO cache directory %s: %w", dir, err)
	}
	if client == nil {
		client = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{root: root, client: client, log: log, now: time.Now, ctx: ctx, cancel: cancel, entries: map[string]*entry{}}
	if err := c.adopt(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Close stops the running fetches, waits for them and releases the directory. Later Ensure calls
// report Failed and Handler serves nothing.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	return c.root.Close()
}

// Ensure reports img's state and, for an image not cached yet or whose retry time has come, starts
// fetching it in the background. It never waits for the network: call it again (on a requeue) to see
// progress.
func (c *Cache) Ensure(img metal3v1.Image) State {
	k := key(img)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return State{Phase: Failed, Message: "the live ISO cache is closed"}
	}
	e := c.entries[k]
	switch {
	case e == nil:
		e = &entry{key: k, url: imagechecksum.RedactString(img.URL)}
		c.entries[k] = e
		if err := check(img); err != nil {
			e.phase, e.message = Failed, err.Error() // no RetryAt: the same spec fails the same way
			break
		}
		c.startFetch(e, img)
	case e.phase == Failed && !e.retryAt.IsZero() && !c.now().Before(e.retryAt):
		c.startFetch(e, img)
	}
	if e.url == "" {
		e.url = imagechecksum.RedactString(img.URL)
	}
	return e.state(strings.TrimSpace(img.Checksum) != "")
}

// Keep drops every image not in inUse: a running fetch is cancelled, a cached file deleted, a failure
// forgotten. Call it with every image a host still needs (after the informers synced: an empty list
// empties the cache); a listed image is never touched, whatever its phase.
func (c *Cache) Keep(inUse []metal3v1.Image) {
	keep := make(map[string]bool, len(inUse))
	for _, img := range inUse {
		keep[key(img)] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for k, e := range c.entries {
		if keep[k] {
			continue
		}
		if e.cancel != nil {
			e.cancel()
		}
		delete(c.entries, k)
		if err := c.root.Remove(isoName(k)); err != nil && !os.IsNotExist(err) {
			c.log.Error(err, "Failed to remove a live ISO no host uses", "key", k)
			continue
		}
		c.log.V(1).Info("Dropping live ISO no host uses", "key", k, "url", e.url, "phase", e.phase)
	}
}

func (e *entry) state(verified bool) State {
	st := State{Phase: e.phase, Message: e.message, RetryAt: e.retryAt}
	switch e.phase {
	case Ready:
		st.Path, st.Size, st.SHA256, st.Verified = PathPrefix+isoName(e.key), e.size, e.sha256, verified
		if !verified {
			st.Message = "served unverified: spec.image names no checksum"
		}
	case Fetching:
		st.Message = e.progressMessage()
	}
	return st
}

func (e *entry) progressMessage() string {
	if e.progress == nil {
		return ""
	}
	what := e.url
	if what == "" {
		what = "the cached copy"
	}
	msg := fmt.Sprintf("%s %s: %s", e.progress.verb, what, mib(e.progress.done.Load()))
	if total := e.progress.total.Load(); total >= 0 {
		msg += " of " + mib(total)
	}
	return msg
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// check refuses, before any fetch, what no retry can fix.
func check(img metal3v1.Image) error {
	u, err := url.Parse(img.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("image url %s is not an http(s) URL: the boot server fetches live ISOs over HTTP to serve them to hosts", imagechecksum.RedactString(img.URL))
	}
	if imagechecksum.IsURL(img.Checksum) {
		return nil // resolved with the fetch: the checksum file may be fixed by its publisher
	}
	_, err = imagechecksum.Resolve(context.Background(), nil, img) // a digest: no network
	return err
}

// key identifies an image's bytes: url, checksumType and checksum, each length-prefixed so no two
// different triples hash alike.
func key(img metal3v1.Image) string {
	h := sha256.New()
	for _, s := range []string{img.URL, string(img.ChecksumType), img.Checksum} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		_, _ = h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func isoName(key string) string { return key + ".iso" }

// keyOf returns the key of a "<key>.iso" name; ok is false for any other name.
func keyOf(name string) (string, bool) {
	k, ok := strings.CutSuffix(name, ".iso")
	if !ok || len(k) != 2*sha256.Size || strings.ToLower(k) != k {
		return "", false
	}
	if _, err := hex.DecodeString(k); err != nil {
		return "", false
	}
	return k, true
}
