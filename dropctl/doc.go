// Package dropctl opens, attaches and reloads the pinned fast drop of an
// interface: what xdpdrop drop, xdpdrop rules and the agent all do, in one
// copy. It takes no lock: a caller holds the interface's lock
// (loader.LockInterface) from its first look at the pins to its last write.
package dropctl
