package agent

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// A host provisioned through cloud-init gets its providerID from the datasource's meta data (the bare-metal
// config drive's "providerid", cloud-init's instance-data.json as cloud-init 22.4 writes it); anything
// else — no file, no key, a key of another type, a file that is not JSON — gives none.
func TestCloudInitProviderID(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(content), 0o600)).To(Succeed())
		return p
	}
	g.Expect(cloudInitProviderID(write("metal.json", `{"ds": {"_doc": "x", "meta_data": {"uuid": "8d1e", "local-hostname": "metal-0",
		"providerid": " yonder-metal://default/metal-0\n", "instance-id": "8d1e"}, "network_json": {}}, "v1": {"instance_id": "8d1e"}}`))).
		To(Equal("yonder-metal://default/metal-0"))
	g.Expect(cloudInitProviderID(filepath.Join(dir, "missing.json"))).To(BeEmpty())
	g.Expect(cloudInitProviderID(write("nokey.json", `{"ds": {"meta_data": {"uuid": "8d1e"}}}`))).To(BeEmpty())
	g.Expect(cloudInitProviderID(write("number.json", `{"ds": {"meta_data": {"providerid": 7}}}`))).To(BeEmpty())
	g.Expect(cloudInitProviderID(write("garbage.json", `not json`))).To(BeEmpty())
}
