package pacer

// The BPF object is generated and committed, so `go build` needs no clang.
// Regenerate after editing bpf/pacer.bpf.c (needs clang and libbpf-dev):
//
//	go generate ./tc/pacer
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type flow pacer bpf/pacer.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target bpfel -type bucket -type bucket_key loop bpf/loop.bpf.c
