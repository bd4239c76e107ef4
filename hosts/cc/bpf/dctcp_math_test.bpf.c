// SPDX-License-Identifier: GPL-2.0
/*
 * Test harness for dctcp_math.h: a BPF_PROG_TYPE_SYSCALL program that Go
 * runs with BPF_PROG_TEST_RUN (hosts/cc/math_test.go), so the α and cwnd
 * arithmetic is tested as the kernel executes it, not as a Go re-typing.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include "dctcp_math.h"

char _license[] SEC("license") = "GPL";

/* In and out through the test-run context. Keep in step with mathArgs in
 * math_test.go. */
struct math_args {
	__u32 alpha;  /* in: α before */
	__u32 acked;  /* in: bytes acked in the window */
	__u32 marked; /* in: of which ECE-marked */
	__u32 cwnd;   /* in: window before the cut */
	__u32 next_alpha;  /* out */
	__u32 reduced;     /* out: cwnd·(1−α/2) with the input α */
	__u32 loss;        /* out: cwnd after a loss */
};

SEC("syscall")
int dctcp_math(struct math_args *a)
{
	a->next_alpha = dctcp_next_alpha(a->alpha, a->acked, a->marked);
	a->reduced = dctcp_reduced_cwnd(a->cwnd, a->alpha);
	a->loss = dctcp_loss_cwnd(a->cwnd);
	return 0;
}
