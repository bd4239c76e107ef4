package tc

// The port programs are compiled once with clang and committed, so that
// `go build` needs no clang.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type port_key -type port_cfg -type port_state port bpf/port.bpf.c
