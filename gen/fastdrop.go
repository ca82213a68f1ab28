package gen

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -cflags "-O2 -mcpu=v3 -g -Wall -Werror -I../bpf/include" -target bpfel -type counter -type fd_action -type fd_class -type fd_field -type fd_direct -type fd_layout -type fd_rec_flags -type fd_state -type fd_stamp -type fd_conf -type fd_bm -type fd_v6_ent -type fd_rule_rec -type fd_trace_rec -type fd_xsk_verdict -type fd_lim_flags -type fd_police -type fd_pcnt -type fd_src_key -type fd_ban -type fd_cap_layout -type fd_cap_sel -type fd_cap_ctl -type fd_cap_cnt -type fd_cap_rec Fastdrop ../bpf/fastdrop.c
