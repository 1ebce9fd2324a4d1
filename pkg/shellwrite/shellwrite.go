// Package shellwrite renders the POSIX shell lines that write one file on a host (the write_files of
// bootstrap data turned into a script: the SSH provider's runner, the manual join) so that the file has
// its final mode and owner before any of its content is written: a bootstrap token or kubeconfig is never
// readable under a wider mode, not even for an instant, and not when the file exists with one.
package shellwrite

import (
	"encoding/base64"
	"fmt"
	"path"
	"strings"
)

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// File appends to b the commands that write content to file p with mode (octal, e.g. "0600") and owner
// ("user:group"); with appendTo the content is appended to what p holds. The commands fail (under set
// -e) when any step does.
//
// A new content goes to a file of its own beside p (mktemp creates it 0600), gets mode and owner, and is
// renamed over p; when a step fails (an owner the host does not have, a full disk) that file is removed, so
// a failed write leaves p as it was and nothing beside it. An append first creates p (if missing) under
// umask 077 and sets mode and owner, then appends.
func File(b *strings.Builder, p, mode, owner string, content []byte, appendTo bool) {
	dir, file, data := Quote(path.Dir(p)), Quote(p), Quote(base64.StdEncoding.EncodeToString(content))
	mode, owner = Quote(mode), Quote(owner)
	fmt.Fprintf(b, "mkdir -p %s\n", dir)
	if appendTo {
		fmt.Fprintf(b, "(umask 077 && : >> %s)\nchmod %s %s\nchown %s %s\n", file, mode, file, owner, file)
		fmt.Fprintf(b, "printf '%%s' %s | base64 -d >> %s\n", data, file)
		return
	}
	fmt.Fprintf(b, "t=$(mktemp %s/.yonder-write.XXXXXX)\n", dir)
	fmt.Fprintf(b, "if printf '%%s' %s | base64 -d > \"$t\" && chmod %s \"$t\" && chown %s \"$t\" && mv -f \"$t\" %s; then :; else rm -f \"$t\"; false; fi\n",
		data, mode, owner, file)
}
