package fastdrop

import "unsafe"

// The table mirrors are kept as Go slices of the element types the program
// reads and copied into the maps' memory as bytes. The program is built for
// little-endian BPF only (bpfel), and so is this package, so the bytes of a
// []uint32 in Go's memory are the bytes the map wants.

func u32Bytes(s []uint32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*4)
}

func u16Bytes(s []uint16) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*2)
}

func bmBytes(s []bitmap) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(bitmap{})))
}

func counterSlice(b []byte) []counterPair {
	n := len(b) / int(unsafe.Sizeof(counterPair{}))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*counterPair)(unsafe.Pointer(&b[0])), n)
}
