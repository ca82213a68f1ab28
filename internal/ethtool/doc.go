// Package ethtool is the project's one client of the SIOCETHTOOL ioctl:
// a driver's name and statistics (`ethtool -i`, `ethtool -S`) for the
// benchmarks, and GRO on and off (`ethtool -k`, `ethtool -K`) for the
// sandbox's veth pairs.
//
// golang.org/x/sys/unix reads the driver information
// (unix.IoctlGetEthtoolDrvinfo); what it lacks (the string set, the
// statistics and the GRO value, which pass pointers to structs inside
// struct ifreq) is in unsafe.go, the package's only unsafe code.
//
// A Socket works on the interfaces of the network namespace it was opened
// in, from whichever thread uses it.
package ethtool
