// Package apie2e holds the end-to-end test of the network add-on: the real controller against an envtest
// apiserver, the real yonder-net-node daemons in namespace nodes, and the API side of each daemon.
package apie2e
