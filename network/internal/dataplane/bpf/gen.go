// Package bpf holds the pod egress eBPF program (C in c/, compiled with bpf2go; the generated Go and object
// files are committed so building needs no clang) and the Go side that loads it, attaches it (tcx, with a
// clsact fallback) and keeps its maps equal to the desired routes with diff updates.
package bpf

//go:generate go tool bpf2go -cc clang-14 -target bpfel -type prefix_key -type backend -type group egress c/egress.c -- -O2 -g -Wall -I/usr/include/x86_64-linux-gnu
