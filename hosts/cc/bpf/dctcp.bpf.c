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
 * cwnd·(1 − α/2); cong_control() cuts the window to it at once. Loss is
 * answered with a TCP halving. Growth is Reno's.
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
	__u32 last_cwnd;     /* last window known good, see repair() */
	__u32 state;         /* congestion state, as last told by set_state */
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
	ca->last_cwnd = tp->snd_cwnd;
	ca->state = bpf_core_enum_value(enum tcp_ca_state, TCP_CA_Open);
	start_window(ca, tp);
}

/*
 * Working around a kernel bug.
 *
 * On Linux 6.18 with the SRSO "Safe RET" mitigation, a struct_ops call that
 * returns a value (undo_cwnd, ssthresh) now and then returns the address
 * srso_return_thunk+5 instead of our program's result: the program's run
 * count does not move, and the kernel stores the low 32 bits as the window
 * or the threshold (tcp_snd_cwnd_set warns, "(int)val <= 0"). The kernel
 * then derives more values from it: prior_cwnd, PRR's window. Left alone, a
 * flow sends a burst of hundreds of packets and can stay stuck with a
 * standing queue. Reno as a 10-line BPF program suffers the same (measured:
 * 349 KB mean backlog where the kernel's own Reno keeps 5.6 KB).
 *
 * No real window is above 2^20 segments (1.5 GB; Linux windows stop at
 * 1 GB), while the garbage and anything the kernel derives from it within a
 * few steps are far above. So every callback validates the window and the
 * threshold, remembers the last good window, and puts sane values back
 * before the stack can send with bad ones. See hosts/cc/README.md.
 */
#define SANE_CWND_MAX (1U << 20)

/* How many values repair() put back, across all sockets: Go reads it
 * (cc.KernelBugRepairs) so that a run can say how often the bug struck. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dctcp_repairs SEC(".maps");

static __always_inline void count_repair(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&dctcp_repairs, &zero);

	if (n)
		__sync_fetch_and_add(n, 1);
}
#define TCP_INFINITE_SSTHRESH 0x7fffffff

static __always_inline int sane(__u32 v)
{
	return v > 0 && v <= SANE_CWND_MAX;
}

static __always_inline __u32 in_flight(struct tcp_sock *tp)
{
	return tp->packets_out - tp->sacked_out - tp->lost_out + tp->retrans_out;
}

/* The window when the current reduction began: the kernel's prior_cwnd,
 * unless that is itself a casualty of the bug. */
static __always_inline __u32 prior_window(struct tcp_sock *tp, struct dctcp *ca)
{
	__u32 prior = tp->prior_cwnd;

	if (!sane(prior))
		prior = ca->last_cwnd;
	return prior < DCTCP_MIN_CWND ? DCTCP_MIN_CWND : prior;
}

static __always_inline void repair(struct tcp_sock *tp, struct dctcp *ca)
{
	__u32 ss = tp->snd_ssthresh;

	if (!sane(ss) && ss != TCP_INFINITE_SSTHRESH) {
		/* A lost ssthresh(): the reduction went on towards a garbage
		 * target, so the window may be garbage too. */
		ss = dctcp_reduced_cwnd(prior_window(tp, ca), ca->alpha);
		tp->snd_ssthresh = ss;
		count_repair();
		if (!sane(tp->snd_cwnd) || tp->snd_cwnd > ss)
			tp->snd_cwnd = ss;
	}
	if (!sane(tp->snd_cwnd)) {
		/* A lost undo_cwnd(): undo restores the earlier window. */
		tp->snd_cwnd = prior_window(tp, ca);
		count_repair();
	}
	ca->last_cwnd = tp->snd_cwnd;
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
	__u32 prior;

	repair(tp, ca);
	ca->state = new_state;
	/* The kernel saved the window in prior_cwnd when this reduction
	 * began, just before calling ssthresh() and then this. */
	prior = prior_window(tp, ca);
	/* Set the reduction's target here as well as in ssthresh(): a void
	 * callback is not subject to the lost return values repair() is
	 * about, and the kernel calls this right after ssthresh(), before
	 * anything is sent. ECN (CWR) cuts by α/2; loss is not ECN and halves
	 * as conventional TCP does. */
	if (new_state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_CWR))
		tp->snd_ssthresh = dctcp_reduced_cwnd(prior, ca->alpha);
	else if (new_state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_Recovery) ||
		 new_state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_Loss))
		tp->snd_ssthresh = dctcp_loss_cwnd(prior);
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

/*
 * cong_control replaces the kernel's per-ACK window logic (proportional rate
 * reduction, then cong_avoid). Owning it is what makes the lost-return-value
 * bug above harmless: with a garbage ssthresh the kernel's PRR computes a
 * window of millions and the flow bursts everything it may send, whereas
 * here the window is only ever set from validated values, and if the kernel
 * skips this call nothing happens at all.
 *
 * During an ECN reduction (CWR) the window is cut at once to ssthresh, as
 * RFC 3168 and the DCTCP paper do; the stack then waits for the flight to
 * drain below it. In loss recovery the flight is kept (one packet out per
 * packet acknowledged, at least one so retransmissions go out) until the
 * kernel ends the recovery with cwnd = ssthresh. Otherwise the window grows
 * as Reno's (slow start, then one segment per window).
 */
SEC("struct_ops/fabric_dctcp_cong_control")
void BPF_PROG(fabric_dctcp_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = state_of(sk);
	__u32 ss, flight;

	repair(tp, ca);
	ss = tp->snd_ssthresh;
	if (ca->state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_CWR)) {
		if (tp->snd_cwnd > ss)
			tp->snd_cwnd = ss;
	} else if (ca->state == bpf_core_enum_value(enum tcp_ca_state, TCP_CA_Recovery)) {
		flight = in_flight(tp);
		if (sane(flight))
			tp->snd_cwnd = flight + 1 > ss ? flight + 1 : ss;
	} else {
		tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
	}
	ca->last_cwnd = tp->snd_cwnd;
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
	.cong_control = (void *)fabric_dctcp_cong_control,
	.undo_cwnd = (void *)fabric_dctcp_undo_cwnd,
	.flags = TCP_CONG_NEEDS_ECN | TCP_CONG_NON_RESTRICTED,
	.name = "fabric_dctcp",
};
