// Package asavie benchmarks package xsk side by side with
// github.com/asavie/xdp, the best-known Go AF_XDP library, in the same run
// on the same veth pair. It is a separate module so that asavie/xdp never
// becomes a dependency of xdpdrop itself.
package asavie
