/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/* See types.h. */
#ifndef _XDPDROP_ASM_POSIX_TYPES_H
#define _XDPDROP_ASM_POSIX_TYPES_H
#include <asm-generic/posix_types.h>
#endif
