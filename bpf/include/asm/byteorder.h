/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/* See types.h. The byte order is the target's: bpfel or bpfeb. */
#ifndef _XDPDROP_ASM_BYTEORDER_H
#define _XDPDROP_ASM_BYTEORDER_H
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#include <linux/byteorder/big_endian.h>
#else
#include <linux/byteorder/little_endian.h>
#endif
#endif
