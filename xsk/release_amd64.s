#include "textflag.h"

// func storeRelease(p *uint32, v uint32)
//
// A plain store: on amd64 every store has release semantics (stores are
// not reordered with earlier loads or stores), and the call itself keeps
// the compiler from moving memory accesses across it. See release.go.
TEXT ·storeRelease(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET
