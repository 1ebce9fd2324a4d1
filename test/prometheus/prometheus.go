// Package prometheus runs the real Prometheus server (Debian's `prometheus` package, /usr/bin/prometheus)
// for the tests and the lab: a generated configuration and a private storage directory, scrape jobs added
// while it runs (the configuration is rewritten and reloaded), and PromQL over its HTTP API, so a test
// asserts what an operator's Prometheus would see — authentication, TLS, label values and all — instead of
// reading a registry in process (test/promread) or a scrape body by hand.
//
// Usage:
//
//	p, err := prometheus.Start(ctx, prometheus.Options{})
//	defer p.Stop()
//	err = p.SetJob(ctx, prometheus.Job{Name: "managers", Scheme: "https", Targets: …, BearerToken: token, InsecureSkipVerify: true})
//	v, err := p.WaitFor(ctx, `up{job="managers"}`, prometheus.All(prometheus.Equals(1)))
package prometheus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
)

// Binary is the Prometheus server the package runs: Debian's, installed by hack/test-bins.sh (DEB_PACKAGES).
const Binary = "prometheus"

// DefaultScrapeInterval is every job's scrape interval unless Options say otherwise: short, so that a
// test sees a change within seconds.
const DefaultScrapeInterval = time.Second

// Options say where Prometheus runs.
type Options struct {
	// Dir holds the configuration, the bearer token files, the TSDB and prometheus.log (default: a new
	// temporary directory, removed by Stop).
	Dir string
	// Host is the address Prometheus listens on, on a free port (default 127.0.0.1).
	Host string
	// ScrapeInterval is every job's scrape interval and evaluation interval (default DefaultScrapeInterval).
	ScrapeInterval time.Duration
}

// Job is one scrape job: the targets of one kind of endpoint and how to authenticate to them.
type Job struct {
	// Name is the job label of the job's series.
	Name string
	// Scheme is http or https (default https: every Yonder metrics endpoint serves TLS).
	Scheme string
	// Targets are host:port addresses, each with the labels to add to its series (nil for none).
	Targets map[string]map[string]string
	// BearerToken is sent as `Authorization: Bearer` (written to a file of its own, 0600, that the
	// configuration names: the token never appears in the configuration or a log).
	BearerToken string
	// CAFile verifies the targets' serving certificates; without it InsecureSkipVerify must say why not.
	CAFile string
	// InsecureSkipVerify accepts any serving certificate: Yonder's metrics servers generate a self-signed
	// one at start (controller-runtime's secure metrics without a cert dir), which no CA file names.
	InsecureSkipVerify bool
	// ServerName is the name a target's certificate is checked for (default: the target's host).
	ServerName string
}

// Prometheus is a running Prometheus server.
type Prometheus struct {
	// URL is its HTTP address (http://host:port), for the API and the web UI.
	URL string
	// Dir holds its configuration, token files, storage and log.
	Dir string

	ownDir   bool
	interval time.Duration
	process  *proc.Process
	hc       *http.Client

	mu   sync.Mutex
	jobs map[string]Job
}

// Start runs Prometheus with no scrape job but its own (job "prometheus", its own /metrics) and returns
// once it reports ready. A missing binary is an error naming the Debian package.
func Start(ctx context.Context, opts Options) (_ *Prometheus, rerr error) {
	bin, err := testbins.LookPath(Binary)
	if err != nil {
		return nil, err
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.ScrapeInterval == 0 {
		opts.ScrapeInterval = DefaultScrapeInterval
	}
	p := &Prometheus{Dir: opts.Dir, interval: opts.ScrapeInterval, jobs: map[string]Job{}, hc: &http.Client{Timeout: 10 * time.Second}}
	if p.Dir == "" {
		if p.Dir, err = os.MkdirTemp("", "yonder-prometheus-"); err != nil {
			return nil, fmt.Errorf("failed to create the Prometheus directory: %w", err)
		}
		p.ownDir = true
	}
	defer func() {
		if rerr != nil {
			_ = p.Stop()
		}
	}()
	for _, d := range []string{p.tokenDir(), filepath.Join(p.Dir, "data")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("failed to create %s: %w", d, err)
		}
	}
	port, err := proc.FreePort(opts.Host)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(opts.Host, strconv.Itoa(port))
	p.URL = "http://" + addr
	if err := p.writeConfig(); err != nil {
		return nil, err
	}
	p.process, err = proc.Start("prometheus", p.Dir, nil, bin,
		"--config.file="+p.configPath(), "--storage.tsdb.path="+filepath.Join(p.Dir, "data"),
		"--web.listen-address="+addr,
		// /-/reload applies a rewritten configuration (SetJob) and answers whether it was accepted.
		"--web.enable-lifecycle")
	if err != nil {
		return nil, err
	}
	if err := p.process.WaitFor(ctx, time.Minute, func(ctx context.Context) error {
		_, err := p.get(ctx, "/-/ready", nil)
		return err
	}); err != nil {
		return nil, fmt.Errorf("failed to start Prometheus: %w", err)
	}
	return p, nil
}

// Attach reads a Prometheus that another process runs (the lab supervisor's, at url): Query, WaitFor,
// Series and Targets work; SetJob does not (its configuration is that process's), Stop does nothing.
func Attach(url string, scrapeInterval time.Duration) *Prometheus {
	return &Prometheus{URL: strings.TrimSuffix(url, "/"), interval: scrapeInterval, hc: &http.Client{Timeout: 10 * time.Second}}
}

// Stop stops Prometheus and removes its directory when Start created it.
func (p *Prometheus) Stop() error {
	var errs []error
	if p.process != nil {
		errs = append(errs, p.process.Stop(10*time.Second))
	}
	if p.ownDir && os.Getenv("YONDER_KEEP_TEST_DIRS") == "" {
		errs = append(errs, os.RemoveAll(p.Dir))
	}
	return errors.Join(errs...)
}

// Log returns the last n lines Prometheus wrote (scrape and configuration errors).
func (p *Prometheus) Log(n int) string {
	if p.process == nil {
		return ""
	}
	return p.process.Tail(n)
}

// SetJob adds the scrape job, or replaces the job of the same name (targets that moved, a new token), and
// returns once Prometheus accepted the new configuration.
func (p *Prometheus) SetJob(ctx context.Context, j Job) error {
	if p.process == nil {
		return fmt.Errorf("failed to add scrape job %s: this Prometheus runs in another process (Attach)", j.Name)
	}
	if j.Name == "" || j.Name == "prometheus" {
		return fmt.Errorf("failed to add scrape job %q: a job needs a name other than prometheus (its own job)", j.Name)
	}
	if j.Scheme == "" {
		j.Scheme = "https"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tokenPath := filepath.Join(p.tokenDir(), j.Name)
	if j.BearerToken != "" {
		if err := os.WriteFile(tokenPath, []byte(j.BearerToken), 0o600); err != nil {
			return fmt.Errorf("failed to write the token of scrape job %s: %w", j.Name, err)
		}
	}
	p.jobs[j.Name] = j
	if err := p.writeConfig(); err != nil {
		return err
	}
	if _, err := p.post(ctx, "/-/reload"); err != nil {
		return fmt.Errorf("failed to reload Prometheus with scrape job %s: %w\n%s", j.Name, err, p.Log(5))
	}
	return nil
}

func (p *Prometheus) tokenDir() string   { return filepath.Join(p.Dir, "tokens") }
func (p *Prometheus) configPath() string { return filepath.Join(p.Dir, "prometheus.yml") }

// writeConfig writes prometheus.yml from the jobs (the caller holds mu, or Start runs alone).
func (p *Prometheus) writeConfig() error {
	interval := p.interval.String()
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
	}
	jobs := []any{map[string]any{"job_name": "prometheus", "static_configs": []any{map[string]any{"targets": []string{strings.TrimPrefix(p.URL, "http://")}}}}}
	names := make([]string, 0, len(p.jobs))
	for n := range p.jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		jobs = append(jobs, p.jobConfig(p.jobs[n]))
	}
	cfg["scrape_configs"] = jobs
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("failed to render the Prometheus configuration: %w", err)
	}
	if err := os.WriteFile(p.configPath(), data, 0o600); err != nil {
		return fmt.Errorf("failed to write the Prometheus configuration: %w", err)
	}
	return nil
}

// jobConfig is one scrape_configs entry, in the shape docs/README.md documents for the providers.
func (p *Prometheus) jobConfig(j Job) map[string]any {
	var statics []any
	addrs := make([]string, 0, len(j.Targets))
	for a := range j.Targets {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		sc := map[string]any{"targets": []string{a}}
		if len(j.Targets[a]) > 0 {
			sc["labels"] = j.Targets[a]
		}
		statics = append(statics, sc)
	}
	c := map[string]any{"job_name": j.Name, "scheme": j.Scheme, "static_configs": statics}
	if j.BearerToken != "" {
		c["authorization"] = map[string]any{"credentials_file": filepath.Join(p.tokenDir(), j.Name)}
	}
	if j.Scheme == "https" {
		tls := map[string]any{}
		if j.CAFile != "" {
			tls["ca_file"] = j.CAFile
		}
		if j.InsecureSkipVerify {
			tls["insecure_skip_verify"] = true
		}
		if j.ServerName != "" {
			tls["server_name"] = j.ServerName
		}
		c["tls_config"] = tls
	}
	return c
}

// Sample is one series of a query result: its labels (with __name__ when it has one) and its value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Vector is an instant query's result.
type Vector []Sample

// Query evaluates an instant PromQL query now. A result that is not a vector (a scalar, a string) is an
// error: tests compare series.
func (p *Prometheus) Query(ctx context.Context, promql string) (Vector, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {promql}}, &data); err != nil {
		return nil, fmt.Errorf("failed to query %s: %w", promql, err)
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("failed to query %s: the result is a %s, not a vector", promql, data.ResultType)
	}
	v := make(Vector, 0, len(data.Result))
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("failed to query %s: value %v of %v: %w", promql, r.Value[1], r.Metric, err)
		}
		v = append(v, Sample{Labels: r.Metric, Value: f})
	}
	return v, nil
}

// WaitFor queries promql once per scrape interval until ok accepts the result, and returns that result;
// when ctx ends first, the error carries the last result (or query error) and Prometheus's last log lines.
func (p *Prometheus) WaitFor(ctx context.Context, promql string, ok func(Vector) bool) (Vector, error) {
	var last Vector
	var lastErr error
	for {
		last, lastErr = p.Query(ctx, promql)
		if lastErr == nil && ok(last) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("failed to see %s as expected (last result %v, error %v): %w\nPrometheus log:\n%s", promql, last, lastErr, ctx.Err(), p.Log(5))
		case <-time.After(p.interval):
		}
	}
}

// All accepts a non-empty result whose every sample the predicate accepts.
func All(pred func(float64) bool) func(Vector) bool {
	return func(v Vector) bool {
		for _, s := range v {
			if !pred(s.Value) {
				return false
			}
		}
		return len(v) > 0
	}
}

// Equals is a predicate for All: the value is want.
func Equals(want float64) func(float64) bool { return func(f float64) bool { return f == want } }

// Above is a predicate for All: the value is greater than bound.
func Above(bound float64) func(float64) bool { return func(f float64) bool { return f > bound } }

// Sum is the sum of a result's values (0 for an empty result: a counter no target exports yet).
func (v Vector) Sum() float64 {
	var s float64
	for _, x := range v {
		s += x.Value
	}
	return s
}

// Series returns the label sets of every series Prometheus holds that match (a series selector such as
// `{__name__=~"yonder_.*"}`), over its whole retention: what a scan for leaked values must look at.
func (p *Prometheus) Series(ctx context.Context, match string) ([]map[string]string, error) {
	var data []map[string]string
	if err := p.api(ctx, "/api/v1/series", url.Values{"match[]": {match}, "start": {"0"}}, &data); err != nil {
		return nil, fmt.Errorf("failed to list the series of %s: %w", match, err)
	}
	return data, nil
}

// Target is one scrape target as Prometheus's /api/v1/targets reports it.
type Target struct {
	Job       string
	ScrapeURL string
	Labels    map[string]string
	Health    string
	LastError string
}

// Targets returns the active scrape targets (health "up", "down" or "unknown" before the first scrape).
func (p *Prometheus) Targets(ctx context.Context) ([]Target, error) {
	var data struct {
		ActiveTargets []struct {
			Labels     map[string]string `json:"labels"`
			ScrapePool string            `json:"scrapePool"`
			ScrapeURL  string            `json:"scrapeUrl"`
			Health     string            `json:"health"`
			LastError  string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := p.api(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		return nil, fmt.Errorf("failed to list the targets: %w", err)
	}
	ts := make([]Target, 0, len(data.ActiveTargets))
	for _, t := range data.ActiveTargets {
		ts = append(ts, Target{Job: t.ScrapePool, ScrapeURL: t.ScrapeURL, Labels: t.Labels, Health: t.Health, LastError: t.LastError})
	}
	return ts, nil
}

// api GETs an HTTP API path and decodes the data of a successful answer into out.
func (p *Prometheus) api(ctx context.Context, path string, q url.Values, out any) error {
	body, err := p.get(ctx, path, q)
	if err != nil {
		return err
	}
	var resp struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("failed to decode the answer of %s: %w", path, err)
	}
	if resp.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.ErrorType, resp.Error)
	}
	return json.Unmarshal(resp.Data, out)
}

func (p *Prometheus) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := p.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return p.do(req)
}

func (p *Prometheus) post(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+path, nil)
	if err != nil {
		return nil, err
	}
	return p.do(req)
}

func (p *Prometheus) do(req *http.Request) ([]byte, error) {
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	// The API answers 400/422 with a JSON error body that api decodes; anything else is the server's.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusUnprocessableEntity {
		return nil, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
