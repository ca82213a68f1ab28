// Package testenv is the test harness every xdpdrop test builds on: skips
// that turn into failures under CI, privilege checks, bpffs, and veth pairs
// in their own network namespaces that are removed when the test ends.
//
// The rule it enforces: a test that needs the kernel may skip only outside
// CI, with a reason that names what is missing. Under CI=true the same
// condition fails the test, so CI can never go green by skipping.
package testenv
