/* SPDX-License-Identifier: GPL-2.0 */
/*
 * DCTCP's arithmetic, in one place so that the congestion control
 * (dctcp.bpf.c) and its test harness (dctcp_math_test.bpf.c, run through
 * BPF_PROG_TEST_RUN from Go) execute the very same code.
 *
 * Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010, §3.1:
 *   once per window of data:  α ← (1−g)·α + g·F,  g = 1/16,
 *       F = fraction of the window's acknowledged bytes whose ACK carried ECE;
 *   on congestion:            cwnd ← cwnd·(1 − α/2).
 *
 * α is fixed point with DCTCP_ALPHA_SHIFT fraction bits. 20 bits rather than
 * the 10 one might pick first: with 10 bits, α − α/16 stops decaying once
 * α < 16/1024 (integer division rounds α/16 to 0), so a flow that saw one
 * burst of marks would keep cutting cwnd by ~0.7% forever. With 20 bits the
 * floor is 16/2^20 ≈ 1.5e-5, which cannot change any real cwnd.
 */
#ifndef FABRIC_CC_DCTCP_MATH_H
#define FABRIC_CC_DCTCP_MATH_H

#define DCTCP_ALPHA_SHIFT 20
#define DCTCP_ALPHA_ONE (1U << DCTCP_ALPHA_SHIFT)
#define DCTCP_G_SHIFT 4 /* g = 1/16 (DCTCP paper §3.4, Table 1 of HULL) */
#define DCTCP_MIN_CWND 2

/* One α update at the end of a window: acked bytes were acknowledged in the
 * window, marked of them by ACKs with ECE set. A window with nothing acked
 * carries no information and leaves α alone. */
static __always_inline __u32 dctcp_next_alpha(__u32 alpha, __u32 acked, __u32 marked)
{
	__u64 f;

	if (acked == 0)
		return alpha;
	if (marked > acked)
		marked = acked;
	f = ((__u64)marked << DCTCP_ALPHA_SHIFT) / acked; /* F in α's scale */
	return alpha - (alpha >> DCTCP_G_SHIFT) + (__u32)(f >> DCTCP_G_SHIFT);
}

/* The window after a congestion signal: cwnd·(1 − α/2), at least 2. */
static __always_inline __u32 dctcp_reduced_cwnd(__u32 cwnd, __u32 alpha)
{
	__u64 cut = ((__u64)cwnd * alpha) >> (DCTCP_ALPHA_SHIFT + 1);
	__u32 next = cwnd - (__u32)cut;

	return next < DCTCP_MIN_CWND ? DCTCP_MIN_CWND : next;
}

/* Loss is answered as conventional TCP does (RFC 8257 §3.5): halve. */
static __always_inline __u32 dctcp_loss_cwnd(__u32 cwnd)
{
	__u32 next = cwnd >> 1;

	return next < DCTCP_MIN_CWND ? DCTCP_MIN_CWND : next;
}

#endif
