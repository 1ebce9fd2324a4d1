package sitetest

import (
	"io"
	"net"
	"sync"
	"time"
)

// DebugAddr is where every node's daemon serves /metrics and /debug inside its namespace (yonder-net-node's
// --debug-addr default: loopback, so only the node itself reaches it).
const DebugAddr = "127.0.0.1:9870"

// ForwardDebug forwards a port on this machine's loopback to node n's debug endpoint, as `kubectl
// port-forward` does for a pod, and returns its host:port: a Prometheus on this machine then scrapes the
// daemon's own /metrics, though the node's namespace has no link to this machine's. Each connection is
// dialled inside the namespace when it arrives, so a restarted daemon is scraped again; the forwarder stops
// with the test.
func (s *Sites) ForwardDebug(n *Node) string {
	s.T.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		s.T.Fatal(err)
	}
	// Prometheus keeps its connections open between scrapes: the cleanup closes them, then waits for the
	// copies, so nothing logs after the test.
	var (
		mu     sync.Mutex
		open   = map[net.Conn]bool{}
		closed bool
		copies sync.WaitGroup
	)
	s.T.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		copies.Wait()
	})
	copies.Add(1)
	go func() {
		defer copies.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = c.Close()
				return
			}
			open[c] = true
			copies.Add(1)
			mu.Unlock()
			go func() {
				defer copies.Done()
				forward(s.T.Logf, c, n.NS)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			}()
		}
	}()
	return ln.Addr().String()
}

// forward copies between c and a new connection to the debug endpoint in ns until either side closes.
func forward(logf func(string, ...any), c net.Conn, ns string) {
	defer func() { _ = c.Close() }()
	d, err := Dial(ns, "tcp4", DebugAddr, 2*time.Second)
	if err != nil {
		// The daemon is down (a test killed it): the scraper sees a closed connection, target down.
		logf("forwarding to %s in %s: %v", DebugAddr, ns, err)
		return
	}
	defer func() { _ = d.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(d, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, d); done <- struct{}{} }()
	<-done
}
