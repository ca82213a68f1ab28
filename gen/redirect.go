package gen

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -mcpu=v3 -g -Wall -Werror -I../bpf/include" -target bpfel -type counter Redirect ../bpf/redirect.c
