// Package gen holds the Go bindings and BPF objects that bpf2go makes from
// the C programs in bpf/. Everything here except doc.go and the files that
// carry a go:generate line is generated: change the C and run
// `make generate`, never edit the output. The objects are committed so that
// `go build` needs no clang; `make check-generate` proves they match.
//
// This is the only package that knows object file names; loader and the
// packages above it load programs through the Load*Objects functions here.
package gen
