// Command xdpdrop attaches XDP fast-drop rules and AF_XDP consumers to
// network interfaces, shows what is attached and what it counts, and
// generates and measures traffic.
//
// The command holds no packet logic: every verb is a thin layer of flags
// and output over the packages fastdrop, xsk, loader, pktgen and agent, which a Go
// program can call the same way. Exit codes: 0 success, 1 failure, 2 wrong
// usage. Every command that prints state takes --json; docs/CLI.md lists
// the field names, which are stable.
package main
