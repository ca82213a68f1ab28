/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/* See types.h. A BPF target's long is 64 bits (bpfel and bpfeb alike). */
#ifndef _XDPDROP_ASM_BITSPERLONG_H
#define _XDPDROP_ASM_BITSPERLONG_H
#define __BITS_PER_LONG 64
#include <asm-generic/bitsperlong.h>
#endif
