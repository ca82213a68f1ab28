// Package sandbox creates and removes the veth pairs and network namespaces
// that xdpdrop's tests, demo and benchmarks run on.
//
// It is a product package (xdpdrop demo and xdpdrop bench build their
// sandboxes with it), so it must not import the test harness; the harness
// (internal/testenv) imports it instead. GRO and SetGRO read and set the
// generic receive offload of a sandbox's ends, which the benchmarks need.
//
// A Pair is a veth pair whose first end stays in the caller's network
// namespace and whose peer end lives in a fresh, uniquely named namespace.
// Names are random so that parallel tests never collide, and Close removes
// exactly what New made, by those names. Nothing here touches an interface
// it did not create.
//
// A process killed before Close (SIGKILL) leaves its pair behind. The
// namespace's name carries the creating process's pid, and New holds a lock
// on the namespace for as long as the process lives: RemoveStale removes
// the pairs of a prefix whose process is gone and whose lock nobody holds.
package sandbox
