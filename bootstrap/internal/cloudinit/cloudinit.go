// Package cloudinit renders Yonder's bootstrap data: a cloud-config that uses only write_files and
// runcmd, so any consumer of cloud-init (cloud images, CAPI infrastructure providers, Yonder's SSH
// provider, which executes exactly this subset) can run it. It installs the digest-pinned yonder-agent,
// writes its AgentConfig (0600: it holds the bootstrap token) and runs `yonder-agent bootstrap`.
package cloudinit

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/cloudconfig"
)

const (
	// AgentPath is where the agent binary is installed.
	AgentPath = "/usr/local/bin/yonder-agent"
	// InstallScriptPath is the installer written by write_files.
	InstallScriptPath = "/usr/local/lib/yonder/install-agent.sh"
)

// AgentSource is where the agent comes from: URL or a local Path (offline bundle), and its digest. A URL
// in a registry (its blob) may need the registry's CA and credentials.
type AgentSource struct {
	URL    string
	Path   string
	SHA256 string
	// CACertificate (PEM) is trusted for the URL besides the host's roots.
	CACertificate string
	// Username and Password authenticate to the URL's server: HTTP basic, or a registry's bearer-token
	// exchange when the server asks for one (anonymous token when empty).
	Username, Password string
}

// AgentCAPath is where the installer finds AgentSource.CACertificate.
const AgentCAPath = "/usr/local/lib/yonder/agent-source-ca.crt"

type (
	// Config is the cloud-config subset Yonder renders (pkg/cloudconfig, where it is parsed and run).
	Config = cloudconfig.Config
	// WriteFile is one of its write_files entries.
	WriteFile = cloudconfig.WriteFile
)

var sha256RE = regexp.MustCompile(`^[a-f0-9]{64}$`)

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var installTmpl = template.Must(template.New("install").Funcs(template.FuncMap{"q": shellQuote}).Parse(`#!/bin/sh
# Installs yonder-agent, pinned by sha256. Idempotent: an agent with the right digest is kept.
set -eu
want={{ q .SHA256 }}
dst={{ q .Dest }}
if [ -x "$dst" ] && [ "$(sha256sum "$dst" | cut -d' ' -f1)" = "$want" ]; then exit 0; fi
mkdir -p "$(dirname "$dst")"
tmp="$(mktemp "$dst.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
{{- if .URL }}
src={{ q .URL }}
{{- if .CACertificate }}
ca={{ q .CAPath }}
{{- else }}
ca=
{{- end }}
cred={{ q .Cred }}
hdr="$tmp.headers"
trap 'rm -f "$tmp" "$hdr"' EXIT
# fetch URL [AUTH-HEADER]: prints the HTTP status; the body goes to $tmp, the headers to $hdr.
fetch() {
  curl -sSL --retry 3 ${ca:+--cacert "$ca"} ${2:+-H "$2"} ${cred:+-u "$cred"} -D "$hdr" -o "$tmp" -w '%{http_code}' "$1"
}
# A registry that wants a bearer token names its token service in WWW-Authenticate: get one (with the
# credentials, or anonymous) and ask again.
download() {
  code=$(fetch "$src") || return 1
  if [ "$code" = 401 ]; then
    c=$(sed -n 's/^[Ww][Ww][Ww]-[Aa]uthenticate: *[Bb]earer *//p' "$hdr" | tr -d '\r')
    [ -n "$c" ] || { echo "yonder: $src refused the credentials (401)" >&2; return 1; }
    realm=$(echo "$c" | sed -n 's/.*realm="\([^"]*\)".*/\1/p')
    service=$(echo "$c" | sed -n 's/.*service="\([^"]*\)".*/\1/p')
    scope=$(echo "$c" | sed -n 's/.*scope="\([^"]*\)".*/\1/p')
    code=$(fetch "$realm?service=$service&scope=$scope") || return 1
    token=$(sed -n 's/.*"\(access_\)\{0,1\}token" *: *"\([^"]*\)".*/\2/p' "$tmp" | head -n 1)
    [ -n "$token" ] || { echo "yonder: the token service $realm gave no token ($code)" >&2; return 1; }
    code=$(cred=; fetch "$src" "Authorization: Bearer $token") || return 1
  fi
  [ "$code" = 200 ] || { echo "yonder: $src answered $code" >&2; return 1; }
}
i=0
until
  if command -v curl >/dev/null 2>&1; then download;
  elif command -v wget >/dev/null 2>&1; then wget -q ${ca:+--ca-certificate="$ca"} -O "$tmp" "$src";
  else echo "yonder: neither curl nor wget is installed" >&2; exit 1; fi
do
  i=$((i+1)); [ "$i" -lt 5 ] || { echo "yonder: failed to download $src" >&2; exit 1; }; sleep 5
done
{{- else }}
cp {{ q .Path }} "$tmp"
{{- end }}
got="$(sha256sum "$tmp" | cut -d' ' -f1)"
if [ "$got" != "$want" ]; then echo "yonder: yonder-agent sha256 is $got, want $want" >&2; exit 1; fi
chmod 0755 "$tmp"
mv -f "$tmp" "$dst"
trap - EXIT
`))

// installer renders the shell script that installs the agent at dest.
func installer(agent AgentSource, dest string) (string, error) {
	var script bytes.Buffer
	cred := ""
	if agent.Username != "" {
		cred = agent.Username + ":" + agent.Password
	}
	if err := installTmpl.Execute(&script, struct {
		AgentSource
		Dest, CAPath, Cred string
	}{agent, dest, AgentCAPath, cred}); err != nil {
		return "", fmt.Errorf("failed to render the agent installer: %w", err)
	}
	return script.String(), nil
}

// Render builds the cloud-config for an AgentConfig and an agent source.
func Render(cfg *agentv1.AgentConfig, agent AgentSource) ([]byte, error) {
	if (agent.URL == "") == (agent.Path == "") {
		return nil, fmt.Errorf("agent source needs exactly one of URL and Path")
	}
	if !sha256RE.MatchString(agent.SHA256) {
		return nil, fmt.Errorf("agent sha256 must be 64 lowercase hex characters")
	}
	agentCfg, err := agentv1.Encode(cfg)
	if err != nil {
		return nil, err
	}
	script, err := installer(agent, AgentPath)
	if err != nil {
		return nil, err
	}
	c := Config{
		WriteFiles: []WriteFile{
			{Path: InstallScriptPath, Owner: "root:root", Permissions: "0700", Content: script},
			{Path: agentv1.DefaultPath, Owner: "root:root", Permissions: "0600", Encoding: "b64", Content: base64.StdEncoding.EncodeToString(agentCfg)},
		},
		RunCmd: [][]string{
			{"/bin/sh", InstallScriptPath},
			{AgentPath, "bootstrap", "--config", agentv1.DefaultPath},
		},
	}
	if agent.CACertificate != "" {
		// Before the installer, which reads it.
		c.WriteFiles = append([]WriteFile{{Path: AgentCAPath, Owner: "root:root", Permissions: "0644", Content: agent.CACertificate}}, c.WriteFiles...)
	}
	body, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("failed to render cloud-config: %w", err)
	}
	return append([]byte(cloudconfig.Header), body...), nil
}

// Parse reads a cloud-config produced by Render (strictly: only write_files and runcmd).
func Parse(data []byte) (*Config, error) { return cloudconfig.Parse(data) }
