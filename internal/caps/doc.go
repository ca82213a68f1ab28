// Package caps reads the calling thread's effective Linux capabilities and
// words what an operation the kernel refused needs and what the process
// lacks, so that a "not permitted" names the missing capability instead of
// a list the process may already hold.
package caps
