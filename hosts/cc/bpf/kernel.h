/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types the DCTCP struct_ops program touches.
 *
 * Only the fields we use are declared. preserve_access_index makes clang
 * emit CO-RE relocations, so the loader rewrites every field offset against
 * the running kernel's BTF (/sys/kernel/btf/vmlinux). That keeps a 3 MB
 * generated vmlinux.h out of the repository and lets one object load on any
 * kernel with BTF and struct_ops, whatever its struct layout.
 */
#ifndef FABRIC_CC_KERNEL_H
#define FABRIC_CC_KERNEL_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

struct sock {
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct {
		__u8 pending;
	} icsk_ack;
	__u64 icsk_ca_priv[13];
} __attribute__((preserve_access_index));

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 snd_una;
	__u32 snd_nxt;
	__u32 rcv_nxt;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 prior_cwnd;
	__u32 packets_out;
	__u32 sacked_out;
	__u32 lost_out;
	__u32 retrans_out;
	__u8 ecn_flags;
} __attribute__((preserve_access_index));

struct rate_sample {
	__u32 acked_sacked;
} __attribute__((preserve_access_index));

/* Enum values come from the kernel's BTF at load time
 * (bpf_core_enum_value), so only the names are needed here. */
enum tcp_ca_event {
	CA_EVENT_ECN_NO_CE = 4,
	CA_EVENT_ECN_IS_CE = 5,
};

enum tcp_ca_ack_event_flags {
	CA_ACK_ECE = 4,
};

enum tcp_ca_state {
	TCP_CA_Open = 0,
	TCP_CA_CWR = 2,
	TCP_CA_Recovery = 3,
	TCP_CA_Loss = 4,
};

enum inet_csk_ack_state_t {
	ICSK_ACK_TIMER = 2,
	ICSK_ACK_NOW = 16,
};

/*
 * struct_ops value. cilium/ebpf copies members by name into the kernel's
 * struct tcp_congestion_ops; members left out stay zero (optional hooks).
 */
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_control)(struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, enum tcp_ca_event ev);
	void (*in_ack_event)(struct sock *sk, __u32 flags);
	__u32 (*undo_cwnd)(struct sock *sk);
	void (*init)(struct sock *sk);
	char name[16];
	__u32 flags;
};

/* UAPI value (linux/bpf.h is not included: its types clash with ours). */
enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
};

/* #defines in include/net/tcp.h, so not in BTF. Stable since Linux 4.x. */
#define TCP_CONG_NON_RESTRICTED 0x1
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_DEMAND_CWR 4

#endif
