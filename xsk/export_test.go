package xsk

import (
	"fmt"
	"strconv"
)

// UMEMAddr returns where u's memory is mapped, for the leak test.
func UMEMAddr(u *UMEM) uint64 {
	a, err := strconv.ParseUint(fmt.Sprintf("%p", u.mem)[2:], 16, 64)
	if err != nil {
		panic(err)
	}
	return a
}
