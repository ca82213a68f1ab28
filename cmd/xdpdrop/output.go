package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// writeJSON prints v as indented JSON with a trailing newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns for people.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// rate formats packets per second with a unit people read at a glance.
func rate(pps float64) string {
	switch {
	case pps >= 1e6:
		return fmt.Sprintf("%.2f Mpps", pps/1e6)
	case pps >= 1e3:
		return fmt.Sprintf("%.1f kpps", pps/1e3)
	default:
		return fmt.Sprintf("%.0f pps", pps)
	}
}

// bytesRate formats bits per second from bytes per second.
func bitRate(bps float64) string {
	bits := bps * 8
	switch {
	case bits >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bits/1e9)
	case bits >= 1e6:
		return fmt.Sprintf("%.1f Mbit/s", bits/1e6)
	case bits >= 1e3:
		return fmt.Sprintf("%.1f kbit/s", bits/1e3)
	default:
		return fmt.Sprintf("%.0f bit/s", bits)
	}
}

// jsonMarshal is json.Marshal, compact, for JSON lines.
func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
