package cc

// The BPF objects are generated and committed, so `go build` needs no clang.
// Regenerate after editing bpf/*.c or bpf/*.h (needs clang and libbpf-dev):
//
//	go generate ./hosts/cc
//
// The math harness is only compiled into the tests (-output-suffix _test).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -no-global-types dctcp bpf/dctcp.bpf.c
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -output-suffix _test -type math_args dctcpMath bpf/dctcp_math_test.bpf.c
