module github.com/xdpdrop/xdpdrop/bench/asavie

go 1.26.0

replace github.com/xdpdrop/xdpdrop => ../..

require (
	github.com/asavie/xdp v0.3.4-0.20240826152323-67e5ba17320c
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netns v0.0.5
	github.com/xdpdrop/xdpdrop v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.50.0
)

require github.com/vishvananda/netlink v1.3.1 // indirect
