package baremetalhost

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/redfish"
)

// recordingClient records what the session cache does with a client.
type recordingClient struct {
	redfish.Client
	reused, closed int
}

func (c *recordingClient) Reuse() { c.reused++ }
func (c *recordingClient) Close() { c.closed++ }

// A kept client is handed out again only for the configuration it was opened with, readied for reuse;
// anything else — changed credentials, address, pin, basic auth — closes it. drop and closeAll log out.
func TestBMCSessions(t *testing.T) {
	g := NewWithT(t)
	h1, h2 := types.NamespacedName{Namespace: "ns", Name: "h1"}, types.NamespacedName{Namespace: "ns", Name: "h2"}
	addr, err := redfish.ParseAddress("redfish://bmc.example/redfish/v1/Systems/1")
	g.Expect(err).NotTo(HaveOccurred())
	cfg := redfish.Config{Address: addr, Username: "admin", Password: "pw", PinnedCertSHA256: "aa"}
	key := sessionKey(cfg)
	for _, changed := range []func(c redfish.Config) redfish.Config{
		func(c redfish.Config) redfish.Config { c.Password = "new"; return c },
		func(c redfish.Config) redfish.Config { c.Username = "other"; return c },
		func(c redfish.Config) redfish.Config { c.PinnedCertSHA256 = "bb"; return c },
		func(c redfish.Config) redfish.Config { c.BasicAuth = true; return c },
		func(c redfish.Config) redfish.Config { c.Address.SystemPath = "/redfish/v1/Systems/2"; return c },
	} {
		g.Expect(sessionKey(changed(cfg))).NotTo(Equal(key))
	}
	g.Expect(key).NotTo(ContainSubstring("pw"), "the key holds no secret")
	// Field boundaries count: "ab"+"c" and "a"+"bc" are different credentials.
	g.Expect(sessionKey(redfish.Config{Username: "ab", Password: "c"})).NotTo(Equal(sessionKey(redfish.Config{Username: "a", Password: "bc"})))

	var p bmcSessions
	taken := func(host types.NamespacedName, key string) redfish.Client { c, _ := p.take(host, key); return c }
	g.Expect(taken(h1, key)).To(BeNil(), "nothing kept yet")
	c1 := &recordingClient{}
	proven := time.Now().Add(-time.Minute)
	p.put(h1, key, c1, proven)
	got, gotProven := p.take(h1, key)
	g.Expect(got).To(BeIdenticalTo(c1))
	g.Expect(gotProven).To(Equal(proven), "when the session was last proven travels with it")
	g.Expect(c1.reused).To(Equal(1))
	g.Expect(taken(h1, key)).To(BeNil(), "taken out while a pass uses it")

	p.put(h1, key, c1, proven)
	g.Expect(taken(h1, sessionKey(redfish.Config{Address: addr, Username: "admin", Password: "new"}))).To(BeNil())
	g.Expect(c1.closed).To(Equal(1), "opened with other credentials: logged out")

	c2, c3 := &recordingClient{}, &recordingClient{}
	p.put(h1, key, c2, proven)
	p.put(h1, key, c3, proven)
	g.Expect(c2.closed).To(Equal(1), "a client replaced by another is logged out")
	p.drop(h1)
	g.Expect(c3.closed).To(Equal(1))
	p.drop(h1) // nothing kept: nothing to do

	c4, c5 := &recordingClient{}, &recordingClient{}
	p.put(h1, key, c4, proven)
	p.put(h2, key, c5, proven)
	p.closeAll()
	g.Expect([]int{c4.closed, c5.closed}).To(Equal([]int{1, 1}))
	g.Expect(taken(h1, key)).To(BeNil())
}
