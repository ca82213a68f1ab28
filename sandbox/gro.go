package sandbox

import (
	"fmt"

	"github.com/xdpdrop/xdpdrop/internal/ethtool"
)

// SetGRO turns GRO on or off on interface name in the calling thread's
// namespace, as `ethtool -K name gro on|off` does.
func SetGRO(name string, on bool) error {
	s, err := ethtool.Open()
	if err != nil {
		return fmt.Errorf("sandbox: set GRO on %s: %w", name, err)
	}
	defer s.Close()
	if err := s.SetGRO(name, on); err != nil {
		return fmt.Errorf("sandbox: set GRO on %s: %w", name, err)
	}
	return nil
}

// GRO reports whether GRO is on at interface name.
func GRO(name string) (bool, error) {
	s, err := ethtool.Open()
	if err != nil {
		return false, fmt.Errorf("sandbox: get GRO on %s: %w", name, err)
	}
	defer s.Close()
	on, err := s.GRO(name)
	if err != nil {
		return false, fmt.Errorf("sandbox: get GRO on %s: %w", name, err)
	}
	return on, nil
}
