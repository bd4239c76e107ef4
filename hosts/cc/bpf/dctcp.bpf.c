// SPDX-License-Identifier: GPL-2.0
/*
 * DCTCP as a BPF tcp_congestion_ops, for kernels built without tcp_dctcp.
 *
 * Written from the algorithm: Alizadeh et al., "Data Center TCP (DCTCP)",
 * SIGCOMM 2010 §3.1, and RFC 8257 (sender §3.3–3.5, receiver §3.2).
 *
 * Sender. Every ACK adds the bytes it newly acknowledges to the window's
 * total, and to the marked total when it carries ECE. When snd_una passes
 * the end of the window (snd_nxt at the previous update), α is updated from
 * the marked fraction and a new window starts. The stack enters CWR on ECE
 * at most once per window and asks ssthresh() for the new window, which is
 * cwnd·(1 − α/2). Loss is answered with a TCP halving.
 *
 * Receiver. Classic ECN latches ECE until the sender's CWR; DCTCP instead
 * echoes exactly which segments were CE-marked. The stack reports the CE
 * state of each data segment (CA_EVENT_ECN_IS_CE / _NO_CE). We echo the
 * current state through TCP_ECN_DEMAND_CWR, and when the state flips while a
 * delayed ACK is pending, first ACK the earlier data with the earlier state,
 * then ACK the new segment at once (DCTCP paper §3.1, delayed-ACK state
 * machine).
 *
 * ECN: TCP_CONG_NEEDS_ECN makes every socket using this algorithm negotiate
 * ECN and send ECT(0), whatever net.ipv4.tcp_ecn says.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "dctcp_math.h"

char _license[] SEC("license") = "GPL";

/* Reno's additive increase and slow start, exported to BPF congestion
 * controls as kfuncs. DCTCP keeps TCP's window growth unchanged. */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* Per-socket state, kept in the socket's icsk_ca_priv area (104 bytes). */
struct dctcp {
	__u32 alpha;         /* fraction of marked bytes, DCTCP_ALPHA_ONE = 1 */
	__u32 window_end;    /* α is updated when snd_una reaches this */
	__u32 prior_snd_una; /* snd_una at the previous ACK */
	__u32 acked_bytes;   /* bytes acknowledged in this window */
	__u32 marked_bytes;  /* ... by ACKs that carried ECE */
	__u32 prior_rcv_nxt; /* receiver: rcv_nxt after the previous segment */
	__u32 ce;            /* receiver: CE state of the previous segment */
};

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct dctcp *state_of(struct sock *sk)
{
	return (struct dctcp *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline int seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline void start_window(struct dctcp *ca, struct tcp_sock *tp)
{
	ca->window_end = tp->snd_nxt;
	ca->acked_bytes = 0;
	ca->marked_bytes = 0;
}

SEC("struct_ops/fabric_dctcp_init")
void BPF_PROG(fabric_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = state_of(sk);

	/* α starts at 1: until a flow has measured the congestion it meets,
	 * it answers its first marks as standard TCP would (halving). This is
	 * also what keeps DCTCP safe when the path turns out not to mark. */
	ca->alpha = DCTCP_ALPHA_ONE;
	ca->prior_snd_una = tp->snd_una;
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce = 0;
	start_window(ca, tp);
}

/*
 * repair works around a kernel bug seen on Linux 6.18 with the SRSO "Safe
 * RET" mitigation: now and then a struct_ops call (undo_cwnd, ssthresh)
 * returns the address srso_return_thunk+5 instead of our program's result
 * (the program's run count does not move), and the kernel stores its low
 * 32 bits as the window or the threshold (tcp_snd_cwnd_set warns,
 * "(int)val <= 0"). Kernel text lives at 0xffffffff8xxxxxxx, so such a value
 * always has bit 31 set, which no real window or threshold has
 * (TCP_INFINITE_SSTHRESH is 0x7fffffff). This puts back
 * what our callbacks would have returned, computed from prior_cwnd, the
 * window the kernel saved when the reduction began. It runs in set_state,
 * which the kernel calls right after ssthresh() when a reduction starts and
 * after most undos, and again on every ACK and window event, so a bad value
 * rarely lives long enough for the stack to send with it. Measured: samples
 * of TCP_INFO every 5 ms over 7 s of a fully marked flow showed garbage in
 * 154 of 1400 before, 1 after. See hosts/cc/README.md.
 */
static __always_inline void repair(struct tcp_sock *tp, struct dctcp *ca)
{
	__u32 prior = tp->prior_cwnd > DCTCP_MIN_CWND ? tp->prior_cwnd : DCTCP_MIN_CWND;

	if ((__s32)tp->snd_ssthresh < 0) {
		/* A lost ssthresh(): the reduction it started went on from a
		 * garbage target, so the window is garbage too. */
		__u32 ss = dctcp_reduced_cwnd(prior, ca->alpha);

		tp->snd_ssthresh = ss;
		if (tp->snd_cwnd > prior || (__s32)tp->snd_cwnd <= 0)
			tp->snd_cwnd = ss;
	}
	if ((__s32)tp->snd_cwnd <= 0) {
		/* A lost undo_cwnd(): undo restores the window from before
		 * the reduction. */
		tp->snd_cwnd = prior;
	}
}

SEC("struct_ops/fabric_dctcp_in_ack_event")
void BPF_PROG(fabric_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = state_of(sk);
	__u32 una = tp->snd_una;

	repair(tp, ca);
	__u32 acked = una - ca->prior_snd_una;

	if (seq_before(una, ca->prior_snd_una))
		acked = 0; /* a stale ACK acknowledges nothing */
	else
		ca->prior_snd_una = una;

	ca->acked_bytes += acked;
	if (flags & bpf_core_enum_value(enum tcp_ca_ack_event_flags, CA_ACK_ECE))
		ca->marked_bytes += acked;

	if (!seq_before(una, ca->window_end)) {
		ca->alpha = dctcp_next_alpha(ca->alpha, ca->acked_bytes, ca->marked_bytes);
		start_window(ca, tp);
	}
}

SEC("struct_ops/fabric_dctcp_ssthresh")
__u32 BPF_PROG(fabric_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = state_of(sk);

	return dctcp_reduced_cwnd(tp->snd_cwnd, ca->alpha);
}

SEC("struct_ops/fabric_dctcp_set_state")
void BPF_PROG(fabric_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = state_of(sk);

	repair(tp, ca);
	/* The stack called ssthresh() just before entering Recovery or Loss,
	 * which cut by α/2. Loss is not ECN: halve the window the flow had
	 * when this reduction began (prior_cwnd, saved by the kernel). */
	if (new_state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_Recovery) ||
	    new_state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_Loss))
		tp->snd_ssthresh = dctcp_loss_cwnd(tp->prior_cwnd);
}

static __always_inline void echo_ce(struct tcp_sock *tp, __u32 ce)
{
	if (ce)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

SEC("struct_ops/fabric_dctcp_cwnd_event")
void BPF_PROG(fabric_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = state_of(sk);
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	__u32 ce;

	repair(tp, ca);
	if (ev == bpf_core_enum_value(enum tcp_ca_event, CA_EVENT_ECN_IS_CE))
		ce = 1;
	else if (ev == bpf_core_enum_value(enum tcp_ca_event, CA_EVENT_ECN_NO_CE))
		ce = 0;
	else
		return;

	if (ce != ca->ce) {
		/* Data up to prior_rcv_nxt arrived in the old state and may be
		 * waiting for a delayed ACK: send that ACK now, echoing the old
		 * state, so the sender counts those bytes correctly. */
		if (icsk->icsk_ack.pending &
		    bpf_core_enum_value(enum inet_csk_ack_state_t, ICSK_ACK_TIMER)) {
			echo_ce(tp, ca->ce);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		/* ... and acknowledge this segment without delay. */
		icsk->icsk_ack.pending |=
			bpf_core_enum_value(enum inet_csk_ack_state_t, ICSK_ACK_NOW);
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce = ce;
	echo_ce(tp, ce);
}

SEC("struct_ops/fabric_dctcp_cong_avoid")
void BPF_PROG(fabric_dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	repair(tcp_of(sk), state_of(sk));
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/fabric_dctcp_undo_cwnd")
__u32 BPF_PROG(fabric_dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);

	/* Back to the window from before the reduction being undone. */
	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

/* The name is rewritten by the Go loader ("dctcp" when the kernel has no
 * DCTCP of its own, "fabric_dctcp" otherwise); see hosts/cc. */
SEC(".struct_ops.link")
struct tcp_congestion_ops fabric_dctcp = {
	.init = (void *)fabric_dctcp_init,
	.in_ack_event = (void *)fabric_dctcp_in_ack_event,
	.ssthresh = (void *)fabric_dctcp_ssthresh,
	.set_state = (void *)fabric_dctcp_set_state,
	.cwnd_event = (void *)fabric_dctcp_cwnd_event,
	.cong_avoid = (void *)fabric_dctcp_cong_avoid,
	.undo_cwnd = (void *)fabric_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN | TCP_CONG_NON_RESTRICTED,
	.name = "fabric_dctcp",
};
