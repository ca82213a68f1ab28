// Package tests holds xdpdrop's integration tests: BPF programs run in the
// kernel with BPF_PROG_TEST_RUN, and traffic on veth pairs in network
// namespaces the tests create. There is no non-test code here.
package tests
