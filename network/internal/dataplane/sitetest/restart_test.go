package sitetest

import (
	"io"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/daemon"
	"github.com/yonder-dev/yonder/network/internal/dataplane/wgdev"
)

// TestRestartKeepsFlows restarts the daemons of an ordinary node and of a gateway while a TCP connection and
// a UDP flow run through them: the restarted daemon adopts the kernel state and writes nothing that is
// unchanged, the key (and so the published public key) stays, and the TCP connection survives.
func TestRestartKeepsFlows(t *testing.T) {
	g := NewWithT(t)
	s := NewSites(t, netv1.ProtocolWireGuard)
	a1, b2 := s.Nodes["a1"], s.Nodes["b2"]
	Echo(t, b2.Pod, 7000)
	to := net.JoinHostPort(b2.PodIP.String(), "7000")
	g.Eventually(func() error { return udpRoundTrip(a1.Pod, to, 100) }, 20*time.Second, 100*time.Millisecond).Should(Succeed())

	// The first connection is retried like the datagram above: the sites may still be settling (a gateway's
	// first probes on a loaded machine) and one lost SYN costs a second. What this test proves starts once it
	// is open; every failed try is logged, and a failure prints each daemon's state and log.
	var conn net.Conn
	tries := 0
	g.Eventually(func() error {
		tries++
		c, err := Dial(a1.Pod, "tcp4", to, 2*time.Second)
		if err != nil {
			t.Logf("TCP connect try %d: %v", tries, err)
			return err
		}
		conn = c
		return nil
	}, 20*time.Second, 100*time.Millisecond).Should(Succeed(), s.diag)
	defer func() { _ = conn.Close() }()
	exchange := func() error {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		msg := []byte("still there?")
		if _, err := conn.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(conn, make([]byte, len(msg)))
		return err
	}
	g.Expect(exchange()).To(Succeed())
	// MSS clamping: the connection's MSS fits the path (the WireGuard link's planned MTU 1370 − 40).
	ss, err := s.Lab.Exec(a1.Pod, "ss", "-tni", "dst", b2.PodIP.String())
	g.Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`\bmss:(\d+)`).FindStringSubmatch(ss)
	g.Expect(m).NotTo(BeNil(), ss)
	g.Expect(strconv.Atoi(m[1])).To(BeNumerically("<=", 1370-40), ss)

	st := startStream(t, a1.Pod, to)
	defer func() { close(st.stop); st.done.Wait() }()
	g.Eventually(st.count, 5*time.Second).Should(BeNumerically(">", 100))

	for _, name := range []string{"a1", "ga1", "ga2", "gb1"} {
		n := s.Nodes[name]
		before, err := s.Debug(n)
		g.Expect(err).NotTo(HaveOccurred())
		t0 := time.Now()
		s.Stop(n)
		s.Start(n)
		var after daemon.Status
		g.Eventually(func() (int64, error) {
			after, err = s.Debug(n)
			return after.Applied, err
		}, 20*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 1), n.Log)
		g.Expect(after.PublicKey).To(Equal(before.PublicKey), "the key survives a restart")
		w := after.Writes
		g.Expect(w.Links+w.FDB+w.Neigh+w.Routes).To(BeZero(), "%s: a restart must not rewrite unchanged kernel state: %+v", name, w)
		if after.WireGuard.Kind == wgdev.KindKernel {
			g.Expect(w.Peers + w.WireGuardDevice).To(BeZero())
		} else {
			g.Expect(w.WireGuardDevice).To(Equal(1+len(after.WireGuard.Peers)), "address and one /32 route per peer")
			// The embedded device lived in the old process: its peers are configured again.
			g.Expect(w.Peers).To(Equal(len(after.WireGuard.Peers)))
		}
		n0 := st.count()
		g.Eventually(st.count, 10*time.Second).Should(BeNumerically(">", n0+100))
		g.Expect(exchange()).To(Succeed(), "the TCP connection survives the restart of %s", name)
		t.Logf("RESTART %s (%s WireGuard): writes %+v, UDP flow interrupted for %v", name, after.WireGuard.Kind, w, st.gapAfter(t0))
	}
}
