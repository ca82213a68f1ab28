/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The <asm/...> headers that the uapi headers include (linux/bpf.h,
 * linux/types.h, linux/ip.h, ...) for the BPF target, so that
 * `go generate` needs no architecture's include directory
 * (-I/usr/include/x86_64-linux-gnu and the like). Each defers to the
 * asm-generic header; see bitsperlong.h and byteorder.h for the two
 * that need a fact about the target.
 */
#ifndef _XDPDROP_ASM_TYPES_H
#define _XDPDROP_ASM_TYPES_H
#include <asm-generic/types.h>
#endif
