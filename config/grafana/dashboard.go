// Package grafana holds Yonder's Grafana dashboard (yonder-grafana-dashboard.json), which `make release`
// ships beside the components. It spans every provider, the boot services and the network dataplane,
// so it lives here rather than in one provider's config/. Its datasource is the template variable
// DS_PROMETHEUS; dashboard_test.go checks that every metric its queries use is one the code registers.
package grafana

import _ "embed"

// Dashboard is the dashboard's JSON, as Grafana imports it (Dashboards → New → Import).
//
//go:embed yonder-grafana-dashboard.json
var Dashboard []byte
