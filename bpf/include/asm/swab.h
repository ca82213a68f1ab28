/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * See types.h. No __arch_swab*: the programs byte-swap with bpf_endian.h,
 * which uses the compiler's builtins (one BPF instruction each).
 */
#ifndef _XDPDROP_ASM_SWAB_H
#define _XDPDROP_ASM_SWAB_H
#include <asm-generic/swab.h>
#endif
