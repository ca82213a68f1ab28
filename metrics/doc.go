// Package metrics exports xdpdrop's counters as Prometheus metrics: the
// fast-drop verdict and per-rule counters of any number of interfaces, and
// the per-queue counters of the redirect program and its AF_XDP sockets.
//
// Collectors read the kernel's counters on each scrape; nothing is cached
// between scrapes, so a scrape always shows what the kernel counts now.
// Per-rule series are limited (a 1M-prefix blocklist must not become a
// million series): only rules that matched something are exported, the
// busiest first, up to a configurable number.
package metrics
