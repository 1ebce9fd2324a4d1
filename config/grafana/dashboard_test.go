package grafana_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/yonder-dev/yonder/config/grafana"

	// The packages whose metrics register with controller-runtime's registry when they are loaded, as
	// in the managers: the claim (inventory, claims), the bootstrap provider, the network controller, and the host controller
	// with its Redfish client. controller-runtime registers its own on load.
	_ "github.com/yonder-dev/yonder/bootstrap/reconcilers/yonderconfig"
	_ "github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	_ "github.com/yonder-dev/yonder/network/reconcilers/routeplan"
	_ "github.com/yonder-dev/yonder/pkg/claim"
)

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string     `json:"refId"`
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestDashboard checks that the shipped JSON is a dashboard Grafana 10+ imports: a title and uid, the
// Prometheus datasource as template variable DS_PROMETHEUS used by every panel and query, panels with
// unique ids inside the 24-column grid, each with at least one PromQL query.
func TestDashboard(t *testing.T) {
	g := NewWithT(t)
	d := parse(t)
	g.Expect(d.Title).NotTo(BeEmpty())
	g.Expect(d.UID).To(MatchRegexp(`^[a-zA-Z0-9_-]{1,40}$`), "Grafana's uid: at most 40 characters")
	g.Expect(d.SchemaVersion).To(BeNumerically(">=", 38), "Grafana 10's schema")
	g.Expect(d.Templating.List).To(ContainElement(And(HaveField("Name", "DS_PROMETHEUS"), HaveField("Type", "datasource"), HaveField("Query", "prometheus"))))

	ids := map[int]string{}
	queries := 0
	for _, p := range panels(d) {
		g.Expect(p.Title).NotTo(BeEmpty(), "panel %d", p.ID)
		g.Expect(ids).NotTo(HaveKey(p.ID), "panel %q reuses id %d", p.Title, p.ID)
		ids[p.ID] = p.Title
		g.Expect(p.GridPos.W).To(BeNumerically(">", 0), p.Title)
		g.Expect(p.GridPos.X+p.GridPos.W).To(BeNumerically("<=", 24), "%q leaves the grid", p.Title)
		if p.Type == "row" {
			continue
		}
		g.Expect(p.Datasource).To(Equal(datasource{Type: "prometheus", UID: "${DS_PROMETHEUS}"}), p.Title)
		g.Expect(p.Targets).NotTo(BeEmpty(), "%q has no query", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			g.Expect(tg.Expr).NotTo(BeEmpty(), p.Title)
			g.Expect(tg.Datasource).To(Equal(p.Datasource), p.Title)
			g.Expect(refs).NotTo(HaveKey(tg.RefID), "%q reuses refId %s", p.Title, tg.RefID)
			refs[tg.RefID] = true
			queries++
		}
	}
	g.Expect(queries).To(BeNumerically(">=", 20))
}

// TestDashboardMetricsExist checks every metric the dashboard's queries read against the code, so the
// dashboard cannot drift from it: a family registered with the managers' registry (controller-runtime's,
// loaded above), or, for families registered at run time into a registry of their own (the boot
// services' DHCP, TFTP, HTTP and attestation metrics, the network node daemon's collector, all in
// internal packages this test cannot load), declared in the module's Go source as a prometheus
// *Opts{Name: …} or prometheus.NewDesc(…).
func TestDashboardMetricsExist(t *testing.T) {
	g := NewWithT(t)
	d := parse(t)
	declared := declaredMetrics(t)
	used := map[string][]string{}
	for _, p := range panels(d) {
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			g.Expect(names).NotTo(BeEmpty(), "no metric found in %q of %q", tg.Expr, p.Title)
			for _, n := range names {
				used[n] = append(used[n], p.Title)
			}
		}
	}
	fromRegistry := 0
	for name, titles := range used {
		switch {
		case registered(metrics.Registry, name):
			fromRegistry++
		case declared[family(name, declared)]:
		default:
			t.Errorf("panel(s) %q query %s, which no code registers", titles, name)
		}
	}
	// The registry answers for the managers' own families: it must have known most of them.
	g.Expect(fromRegistry).To(BeNumerically(">=", 10), "metrics found in the managers' registry")

	var missing []string
	for name := range declared {
		if !slices.ContainsFunc(keys(used), func(u string) bool { return family(u, declared) == name }) {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Logf("families the code declares that no panel shows yet: %s", strings.Join(missing, ", "))
	}
}

// TestMetricNames pins the PromQL reading of metric names on the query shapes the dashboard uses.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (host_kind, state) (yonder_inventory_hosts)`:                                                                    {"yonder_inventory_hosts"},
		`histogram_quantile(0.95, sum by (le, operation) (rate(yonder_bmc_request_duration_seconds_bucket[$__rate_interval])))`: {"yonder_bmc_request_duration_seconds_bucket"},
		`sum(yonder_baremetalhosts{operational_status="error", state=~"a|b"}) or vector(0)`:                                     {"yonder_baremetalhosts"},
		`sum(rate(a_total[5m])) / ignoring(code) group_left sum(b_total offset 1h) * 1e3`:                                       {"a_total", "b_total"},
	} {
		NewWithT(t).Expect(metricNames(expr)).To(Equal(want), expr)
	}
}

func parse(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(grafana.Dashboard, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

// panels lists the panels, those inside collapsed rows included.
func panels(d dashboard) []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

var (
	strLit    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	braces    = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	grouping  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ident     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	notMetric = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression reads: identifiers outside label matchers,
// ranges and grouping clauses that are neither functions, keywords nor parts of numbers or durations.
func metricNames(expr string) []string {
	s := strLit.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(s[loc[0]-1:loc[0]], "0123456789.$") {
			continue // 1e3, 5m, $variable
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") || notMetric[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// registered reports whether reg holds a family named name: registering a probe of that name fails
// exactly when one is (a vector without series yet included, which a Gather would not show).
func registered(reg prometheus.Registerer, name string) bool {
	for _, n := range []string{name, strings.TrimSuffix(name, "_bucket"), strings.TrimSuffix(name, "_sum"), strings.TrimSuffix(name, "_count")} {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "dashboard test probe"})
		if err := reg.Register(probe); err != nil {
			return true
		}
		reg.Unregister(probe)
	}
	return false
}

// family is the declared family a series name belongs to (a histogram's _bucket, _sum, _count).
func family(name string, declared map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base := strings.TrimSuffix(name, suffix); base != name && declared[base] {
			return base
		}
	}
	return name
}

// declaredMetrics reads the yonder_ metric families the module's non-test Go source declares.
func declaredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); path != root && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || n == "out" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if name := declaredName(n); strings.HasPrefix(name, "yonder_") {
				out[name] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// declaredName is the metric name a prometheus.NewDesc("…", …) call or a prometheus.*Opts{Namespace,
// Subsystem, Name} literal declares, "" for anything else.
func declaredName(n ast.Node) string {
	switch n := n.(type) {
	case *ast.CallExpr:
		if isPrometheus(n.Fun, "NewDesc") && len(n.Args) > 0 {
			return literal(n.Args[0])
		}
	case *ast.CompositeLit:
		for _, opts := range []string{"CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts"} {
			if !isPrometheus(n.Type, opts) {
				continue
			}
			parts := map[string]string{}
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok {
						parts[k.Name] = literal(kv.Value)
					}
				}
			}
			return prometheus.BuildFQName(parts["Namespace"], parts["Subsystem"], parts["Name"])
		}
	}
	return ""
}

func isPrometheus(e ast.Expr, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "prometheus" && sel.Sel.Name == name
}

func literal(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
