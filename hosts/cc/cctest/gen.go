package cctest

// Regenerate after editing bpf/cemark.bpf.c (needs clang and libbpf-dev):
//
//	go generate ./hosts/cc/cctest
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types cemark bpf/cemark.bpf.c
