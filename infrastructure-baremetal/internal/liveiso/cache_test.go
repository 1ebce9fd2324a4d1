package liveiso

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/pkg/imagechecksum"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return b
}

// origin is the user's image server: it counts the requests for each path, can hold image requests
// until released, and can be told to stream without Content-Length.
type origin struct {
	*httptest.Server
	mu       sync.Mutex
	files    map[string][]byte
	requests map[string]int
	gate     chan struct{} // non-nil: requests wait for it to close
	chunked  bool
	override http.HandlerFunc // non-nil: answers (counted) requests instead
}

func newOrigin(t *testing.T, files map[string][]byte) *origin {
	t.Helper()
	o := &origin{files: files, requests: map[string]int{}}
	o.Server = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.Close)
	return o
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.requests[r.URL.Path]++
	b, ok := o.files[r.URL.Path]
	gate, chunked, override := o.gate, o.chunked, o.override
	o.mu.Unlock()
	if override != nil {
		override(w, r)
		return
	}
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	if !chunked {
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	}
	_, _ = w.Write(b)
}

func (o *origin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[path]
}

func (o *origin) set(path string, b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.files[path] = b
}

// logs collects a cache's log lines at V(1), to check them for secrets.
type logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.b.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 1})
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newCache(t *testing.T, dir string, o *origin, l *logs) *Cache {
	t.Helper()
	log := logr.Discard()
	if l != nil {
		log = l.logger()
	}
	c, err := New(dir, o.Client(), log)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// settled waits until img is no longer Fetching and returns its state.
func settled(g *WithT, c *Cache, img metal3v1.Image) State {
	var st State
	g.Eventually(func() Phase {
		st = c.Ensure(img)
		return st.Phase
	}).WithTimeout(20 * time.Second).ShouldNot(Equal(Fetching))
	return st
}

func dirNames(g *WithT, dir string) []string {
	es, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func get(c *Cache, method, path string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, req)
	return rec
}

// TestFetchVerifiesAndServes: an ISO named with each checksum form is fetched once, verified, stored
// under its key, and served with ranges, HEAD and If-Range; an ISO without a checksum is served as
// fetched and says so.
func TestFetchVerifiesAndServes(t *testing.T) {
	data := randomBytes(t, 3<<20+17)
	sha := imagechecksum.Digest("sha256", data)
	files := map[string][]byte{
		"/dist/live.iso":   data,
		"/dist/SHA256SUMS": []byte(strings.Repeat("0", 64) + "  other.iso\n" + sha + " *live.iso\n"),
	}
	for _, tc := range []struct {
		name, checksum, typ string
		verified            bool
	}{
		{"sha256", sha, "sha256", true},
		{"md5", imagechecksum.Digest("md5", data), "md5", true},
		{"sha512 auto", imagechecksum.Digest("sha512", data), "auto", true},
		{"SHA256SUMS file", "/dist/SHA256SUMS", "", true},
		{"no checksum", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := newOrigin(t, files)
			dir := t.TempDir()
			c := newCache(t, dir, o, nil)
			checksum := tc.checksum
			if strings.HasPrefix(checksum, "/") {
				checksum = o.URL + checksum
			}
			img := metal3v1.Image{URL: o.URL + "/dist/live.iso", Checksum: checksum, ChecksumType: metal3v1.ChecksumType(tc.typ)}

			st := settled(g, c, img)
			g.Expect(st.Phase).To(Equal(Ready), st.Message)
			g.Expect(st.Path).To(Equal("/live/" + key(img) + ".iso"))
			g.Expect(st.Size).To(Equal(int64(len(data))))
			g.Expect(st.SHA256).To(Equal(sha))
			g.Expect(st.Verified).To(Equal(tc.verified))
			if !tc.verified {
				g.Expect(st.Message).To(ContainSubstring("unverified"))
			}
			g.Expect(c.Ensure(img)).To(Equal(st), "Ready is stable")
			g.Expect(o.count("/dist/live.iso")).To(Equal(1))
			g.Expect(dirNames(g, dir)).To(ConsistOf(key(img) + ".iso"))

			rec := get(c, http.MethodGet, st.Path, map[string]string{"Range": "bytes=1048570-1048599"})
			g.Expect(rec.Code).To(Equal(http.StatusPartialContent))
			g.Expect(rec.Body.Bytes()).To(Equal(data[1048570:1048600]))
			g.Expect(rec.Header().Get("Content-Range")).To(Equal(fmt.Sprintf("bytes 1048570-1048599/%d", len(data))))

			rec = get(c, http.MethodHead, st.Path, nil)
			g.Expect(rec.Code).To(Equal(http.StatusOK))
			g.Expect(rec.Header().Get("Content-Length")).To(Equal(fmt.Sprint(len(data))))
			g.Expect(rec.Header().Get("Accept-Ranges")).To(Equal("bytes"))
			g.Expect(rec.Body.Len()).To(BeZero())

			rec = get(c, http.MethodGet, st.Path, map[string]string{"Range": "bytes=0-9", "If-Range": `"` + sha + `"`})
			g.Expect(rec.Code).To(Equal(http.StatusPartialContent))
			g.Expect(rec.Body.Bytes()).To(Equal(data[:10]))
		})
	}
}

// TestHandlerServesOnlyReadyISOs: a partial file, an unknown key, a name that tries to leave the
// directory and other methods are not served.
func TestHandlerServesOnlyReadyISOs(t *testing.T) {
	g := NewWithT(t)
	data := randomBytes(t, 4096)
	o := newOrigin(t, map[string][]byte{"/live.iso": data})
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(filepath.Dir(dir), "secret.iso"), []byte("outside"), 0o600)).To(Succeed())
	c := newCache(t, dir, o, nil)
	img := metal3v1.Image{URL: o.URL + "/live.iso", Checksum: imagechecksum.Digest("sha256", data)}
	g.Expect(settled(g, c, img).Phase).To(Equal(Ready))
	partial := "." + strings.Repeat("a", 64) + ".1.partial"
	g.Expect(os.WriteFile(filepath.Join(dir, partial), data, 0o600)).To(Succeed())
	stray := strings.Repeat("b", 64) + ".iso"
	g.Expect(os.WriteFile(filepath.Join(dir, stray), data, 0o600)).To(Succeed())

	for _, p := range []string{"/live/" + partial, "/live/" + stray, "/live/" + strings.ToUpper(key(img)) + ".iso",
		"/live/..%2fsecret.iso", "/live/", "/live/" + key(img), "/other/" + key(img) + ".iso"} {
		g.Expect(get(c, http.MethodGet, p, nil).Code).To(Equal(http.StatusNotFound), p)
	}
	rec := get(c, http.MethodGet, "/live/../secret.iso", nil)
	g.Expect(rec.Code).To(Equal(http.StatusTemporaryRedirect), "the mux cleans the path: to one not served")
	g.Expect(rec.Header().Get("Location")).To(Equal("/secret.iso"))
	g.Expect(get(c, http.MethodPut, "/live/"+key(img)+".iso", nil).Code).To(Equal(http.StatusMethodNotAllowed))
	g.Expect(get(c, http.MethodGet, "/live/"+key(img)+".iso", nil).Code).To(Equal(http.StatusOK))
}

// TestFetchFailures: a mismatch, an HTTP error, an ISO over MaxBytes (announced or not) and a stalled
// server fail with a message that names the URL without its credentials and leave no file; a URL
// that is not http(s) and a malformed digest fail at once, with no request and no retry.
func TestFetchFailures(t *testing.T) {
	data := randomBytes(t, 1<<20)
	wrong := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name     string
		path     string // on the origin; "" for url
		url      string
		checksum string
		chunked  bool
		maxBytes int64
		stall    bool
		want     []string
		terminal bool
		fetched  string // the path requested once; path when empty
	}{
		{name: "checksum mismatch", path: "/live.iso", checksum: wrong,
			want: []string{"/live.iso?REDACTED: image checksum mismatch: downloaded image has " + imagechecksum.Digest("sha256", data) + ", spec.image.checksum says " + wrong}},
		{name: "HTTP error", path: "/missing.iso", checksum: wrong, want: []string{"/missing.iso?REDACTED: HTTP 404 Not Found"}},
		{name: "checksum file missing", path: "/live.iso", checksum: "/SHA256SUMS", fetched: "/SHA256SUMS",
			want: []string{"failed to resolve the checksum of", "/SHA256SUMS: HTTP 404 Not Found"}},
		{name: "larger than MaxBytes by Content-Length", path: "/live.iso", checksum: imagechecksum.Digest("sha256", data), maxBytes: 1000,
			want: []string{fmt.Sprintf("the ISO is %d bytes (Content-Length), larger than the cache's limit of 1000 bytes", len(data))}},
		{name: "larger than MaxBytes, streamed", path: "/live.iso", checksum: imagechecksum.Digest("sha256", data), maxBytes: 1000, chunked: true,
			want: []string{"the ISO is larger than the cache's limit of 1000 bytes"}},
		{name: "stalled server", path: "/stall.iso", checksum: wrong, stall: true, want: []string{"the image server stopped sending for 200ms"}},
		{name: "oci", url: "oci://registry.example/live:1", checksum: wrong, terminal: true, want: []string{"image url oci://registry.example/live:1 is not an http(s) URL"}},
		{name: "file", url: "file:///etc/passwd", checksum: wrong, terminal: true, want: []string{"image url file:///etc/passwd is not an http(s) URL"}},
		{name: "ftp with credentials", url: "ftp://admin:hunter2@images.example/live.iso?hunter2", checksum: wrong, terminal: true,
			want: []string{"image url ftp://images.example/live.iso?REDACTED is not an http(s) URL"}},
		{name: "malformed digest", path: "/live.iso", checksum: "abc", terminal: true, want: []string{`image checksum "abc" is not a hex digest`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			o := newOrigin(t, map[string][]byte{"/live.iso": data})
			o.chunked = tc.chunked
			if tc.stall {
				o.override = func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", fmt.Sprint(len(data)))
					_, _ = w.Write(data[:4096])
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				}
			}
			var l logs
			dir := t.TempDir()
			c := newCache(t, dir, o, &l)
			c.MaxBytes = tc.maxBytes
			if tc.stall {
				c.StallTimeout = 200 * time.Millisecond
			}
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			c.now = func() time.Time { return now }
			u := tc.url
			if u == "" {
				withUser, err := url.Parse(o.URL + tc.path + "?token=hunter2")
				g.Expect(err).NotTo(HaveOccurred())
				withUser.User = url.UserPassword("admin", "hunter2")
				u = withUser.String()
			}
			checksum := tc.checksum
			if strings.HasPrefix(checksum, "/") {
				checksum = o.URL + checksum
			}
			img := metal3v1.Image{URL: u, Checksum: checksum}

			first := c.Ensure(img)
			st := settled(g, c, img)
			g.Expect(st.Phase).To(Equal(Failed))
			for _, w := range tc.want {
				g.Expect(st.Message).To(ContainSubstring(w))
			}
			g.Expect(st.Path).To(BeEmpty())
			for _, text := range []string{st.Message, l.String()} {
				g.Expect(text).NotTo(ContainSubstring("hunter2"), "no URL credentials")
				g.Expect(text).NotTo(ContainSubstring("admin"), "no URL user")
			}
			if tc.terminal {
				g.Expect(first.Phase).To(Equal(Failed), "refused at once")
				g.Expect(st.RetryAt).To(BeZero())
				g.Expect(o.count(tc.path)).To(BeZero())
			} else {
				g.Expect(st.RetryAt).To(Equal(now.Add(30 * time.Second)))
				fetched := tc.fetched
				if fetched == "" {
					fetched = tc.path
				}
				g.Expect(o.count(fetched)).To(Equal(1))
			}
			g.Expect(dirNames(g, dir)).To(BeEmpty(), "no file left")
		})
	}
}

// TestRetryBackoff: a Failed image is not fetched again before RetryAt; after it, the next Ensure
// fetches again, the wait doubling (to at most 10 minutes) until a fetch succeeds.
func TestRetryBackoff(t *testing.T) {
	g := NewWithT(t)
	data := randomBytes(t, 8192)
	o := newOrigin(t, map[string][]byte{"/live.iso": []byte("a truncated upload")})
	c := newCache(t, t.TempDir(), o, nil)
	var now atomic.Pointer[time.Time]
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now.Store(&start)
	c.now = func() time.Time { return *now.Load() }
	advance := func(d time.Duration) { t := now.Load().Add(d); now.Store(&t) }
	img := metal3v1.Image{URL: o.URL + "/live.iso", Checksum: imagechecksum.Digest("sha256", data), ChecksumType: "sha256"}

	st := settled(g, c, img)
	g.Expect(st.Phase).To(Equal(Failed))
	g.Expect(st.RetryAt).To(Equal(start.Add(30 * time.Second)))
	advance(29 * time.Second)
	g.Expect(c.Ensure(img).Phase).To(Equal(Failed), "no fetch before RetryAt")
	g.Expect(o.count("/live.iso")).To(Equal(1))

	advance(time.Second)
	g.Expect(c.Ensure(img).Phase).To(Equal(Fetching), "RetryAt has come")
	st = settled(g, c, img)
	g.Expect(st.Phase).To(Equal(Failed))
	g.Expect(st.RetryAt).To(Equal(now.Load().Add(time.Minute)), "the wait doubles")
	g.Expect(o.count("/live.iso")).To(Equal(2))

	o.set("/live.iso", data) // the upload is fixed
	advance(time.Minute)
	st = settled(g, c, img)
	g.Expect(st.Phase).To(Equal(Ready), st.Message)
	g.Expect(st.RetryAt).To(BeZero())
	g.Expect(o.count("/live.iso")).To(Equal(3))

	for failures, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 5: 8 * time.Minute, 6: 10 * time.Minute, 1000: 10 * time.Minute} {
		g.Expect(backoff(failures)).To(Equal(want), "after %d failures", failures)
	}
}

// TestConcurrentEnsureFetchesOnce: 20 callers asking for one image while it downloads cause one
// request to the image server, and see its progress.
func TestConcurrentEnsureFetchesOnce(t *testing.T) {
	g := NewWithT(t)
	data := randomBytes(t, 1<<20)
	o := newOrigin(t, map[string][]byte{"/live.iso": data})
	o.gate = make(chan struct{})
	c := newCache(t, t.TempDir(), o, nil)
	img := metal3v1.Image{URL: o.URL + "/live.iso", Checksum: imagechecksum.Digest("sha256", data)}

	var wg sync.WaitGroup
	states := make([]State, 20)
	for i := range states {
		wg.Go(func() { states[i] = c.Ensure(img) })
	}
	wg.Wait()
	for _, st := range states {
		g.Expect(st.Phase).To(Equal(Fetching))
		g.Expect(st.Message).To(HavePrefix("Fetching " + o.URL + "/live.iso: 0.0 MiB"))
	}
	close(o.gate)
	g.Expect(settled(g, c, img).Phase).To(Equal(Ready))
	g.Expect(o.count("/live.iso")).To(Equal(1))
}

// TestKeep: an image no host uses any more loses its file and is fetched again when asked for; a
// running fetch of a dropped image is cancelled and leaves nothing; listed images stay.
func TestKeep(t *testing.T) {
	g := NewWithT(t)
	a, b := randomBytes(t, 5000), randomBytes(t, 6000)
	o := newOrigin(t, map[string][]byte{"/a.iso": a, "/b.iso": b, "/slow.iso": a})
	dir := t.TempDir()
	c := newCache(t, dir, o, nil)
	imgA := metal3v1.Image{URL: o.URL + "/a.iso", Checksum: imagechecksum.Digest("sha256", a)}
	imgB := metal3v1.Image{URL: o.URL + "/b.iso", Checksum: imagechecksum.Digest("md5", b)}
	stA, stB := settled(g, c, imgA), settled(g, c, imgB)
	g.Expect([]Phase{stA.Phase, stB.Phase}).To(Equal([]Phase{Ready, Ready}))

	c.Keep([]metal3v1.Image{imgB})
	g.Expect(dirNames(g, dir)).To(ConsistOf(key(imgB) + ".iso"))
	g.Expect(get(c, http.MethodGet, stA.Path, nil).Code).To(Equal(http.StatusNotFound))
	g.Expect(get(c, http.MethodGet, stB.Path, nil).Code).To(Equal(http.StatusOK))
	g.Expect(c.Ensure(imgB)).To(Equal(stB))

	g.Expect(c.Ensure(imgA).Phase).To(Equal(Fetching), "asked for again: fetched again")
	g.Expect(settled(g, c, imgA)).To(Equal(stA))
	g.Expect(o.count("/a.iso")).To(Equal(2))

	cancelled := make(chan struct{})
	o.mu.Lock()
	o.override = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(a)))
		_, _ = w.Write(a[:100])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	}
	o.mu.Unlock()
	slow := metal3v1.Image{URL: o.URL + "/slow.iso", Checksum: imagechecksum.Digest("sha256", a)}
	g.Expect(c.Ensure(slow).Phase).To(Equal(Fetching))
	g.Eventually(func() []string { return dirNames(g, dir) }).Should(ContainElement(HavePrefix("." + key(slow))))
	c.Keep([]metal3v1.Image{imgA, imgB})
	g.Eventually(cancelled).Should(BeClosed(), "the fetch is cancelled")
	g.Eventually(func() []string { return dirNames(g, dir) }).Should(ConsistOf(key(imgA)+".iso", key(imgB)+".iso"), "its partial file is removed")
}

// TestNewAdoptsAndCleans: a new cache on a directory a previous run used removes partial files,
// leaves files it does not own, and serves the ISOs already there without fetching them.
func TestNewAdoptsAndCleans(t *testing.T) {
	g := NewWithT(t)
	data := randomBytes(t, 70000)
	o := newOrigin(t, map[string][]byte{"/live.iso": data})
	img := metal3v1.Image{URL: o.URL + "/live.iso", Checksum: o.URL + "/SHA256SUMS"}
	dropped := metal3v1.Image{URL: o.URL + "/old.iso", Checksum: imagechecksum.Digest("sha256", data)}
	dir := filepath.Join(t.TempDir(), "var", "live")
	g.Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
	for name, b := range map[string][]byte{
		key(img) + ".iso":             data,
		key(dropped) + ".iso":         data,
		"." + key(img) + ".7.partial": data[:100],
		".other.partial":              nil,
		"README":                      []byte("not the cache's"),
	} {
		g.Expect(os.WriteFile(filepath.Join(dir, name), b, 0o600)).To(Succeed())
	}

	c := newCache(t, dir, o, nil)
	g.Expect(dirNames(g, dir)).To(ConsistOf(key(img)+".iso", key(dropped)+".iso", "README"), "partial files are removed by New")
	st := settled(g, c, img)
	g.Expect(st.Phase).To(Equal(Ready))
	g.Expect(st.Size).To(Equal(int64(len(data))))
	g.Expect(st.SHA256).To(Equal(imagechecksum.Digest("sha256", data)))
	g.Expect(st.Verified).To(BeTrue())
	g.Expect(get(c, http.MethodGet, st.Path, nil).Body.Bytes()).To(Equal(data))
	g.Expect(o.count("/live.iso")+o.count("/SHA256SUMS")).To(BeZero(), "nothing fetched")

	c.Keep([]metal3v1.Image{img})
	g.Expect(dirNames(g, dir)).To(ConsistOf(key(img)+".iso", "README"), "an adopted ISO no host uses is removed")

	fresh := filepath.Join(t.TempDir(), "a", "cache")
	_ = newCache(t, fresh, o, nil)
	fi, err := os.Stat(fresh)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o700)))
}

// TestClose: after Close, fetches are stopped and nothing more is fetched or served.
func TestClose(t *testing.T) {
	g := NewWithT(t)
	data := randomBytes(t, 1000)
	o := newOrigin(t, map[string][]byte{"/live.iso": data})
	o.gate = make(chan struct{})
	dir := t.TempDir()
	c := newCache(t, dir, o, nil)
	img := metal3v1.Image{URL: o.URL + "/live.iso", Checksum: imagechecksum.Digest("sha256", data)}
	g.Expect(c.Ensure(img).Phase).To(Equal(Fetching))
	g.Expect(c.Close()).To(Succeed()) // returns once the fetch stopped
	st := c.Ensure(img)
	g.Expect(st.Phase).To(Equal(Failed))
	g.Expect(st.Message).To(ContainSubstring("closed"))
	g.Expect(dirNames(g, dir)).To(BeEmpty())
	g.Expect(get(c, http.MethodGet, "/live/"+key(img)+".iso", nil).Code).To(Equal(http.StatusNotFound))
}
