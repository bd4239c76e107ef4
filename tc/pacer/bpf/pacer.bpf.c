// SPDX-License-Identifier: GPL-2.0
/*
 * HULL pacer, flow association (Alizadeh et al., "Less is More", §4.2).
 *
 * pacer_ingress (tc clsact ingress of the host NIC): for each ACK that
 * carries ECN-Echo, associate the flow it acknowledges with the pacer with
 * probability p_a. Small flows see few ECE ACKs and are unlikely to be paced.
 *
 * pacer_egress (tc clsact egress, before the port's own classifier): a
 * packet of an associated flow goes to the pacer's token bucket, an HTB
 * class, by setting skb->priority to its class id (HTB looks skb->priority
 * up as a class before running any filter) and ending classification
 * (TC_ACT_OK). Any other packet is left alone: TC_ACT_UNSPEC lets the next
 * filter (the port's classifier, if any) run, and without one HTB sends it
 * to its default class at line rate. An association expires after T_i
 * without packets.
 *
 * Flows are keyed by the 5-tuple of the outgoing (data) direction; the
 * ingress side builds that key from the ACK by swapping ends. IPv4 only.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "GPL";

/* Set by the Go loader before load (tc/pacer/pacer.go). */
volatile const __u32 assoc_below = 0;   /* p_a as a threshold on a random u32 */
volatile const __u64 idle_ns = 0;       /* T_i */
volatile const __u32 bucket_classid = 0; /* HTB class of the token bucket */

struct flow {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u32 proto;
};

/* Flow Association Table: flow → time of its last packet (ns, monotonic).
 * LRU, so a full table forgets the flows idle the longest. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 64); /* resized by the loader; the paper's table holds 64 */
	__type(key, struct flow);
	__type(value, __u64);
} assoc SEC(".maps");

enum {
	CNT_ECE_ACKS,  /* ACKs with ECE seen on ingress */
	CNT_ASSOCIATED, /* associations made */
	CNT_PACED,     /* packets sent to the bucket */
	CNT_EXPIRED,   /* associations dropped after T_i idle */
	CNT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &i);

	if (c)
		*c += 1;
}

/* tcp_of returns the TCP header of an IPv4 TCP packet, or NULL. */
static __always_inline struct tcphdr *tcp_of(struct __sk_buff *skb, struct iphdr **ipp)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *tcp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return NULL;
	if (ip->protocol != IPPROTO_TCP || ip->ihl < 5)
		return NULL;
	tcp = (void *)ip + ip->ihl * 4;
	if ((void *)(tcp + 1) > end)
		return NULL;
	*ipp = ip;
	return tcp;
}

SEC("tc")
int pacer_ingress(struct __sk_buff *skb)
{
	struct iphdr *ip;
	struct tcphdr *tcp = tcp_of(skb, &ip);
	struct flow f = {};
	__u64 now;

	/* ECE on a SYN or SYN-ACK negotiates ECN; it reports no congestion. */
	if (!tcp || !tcp->ece || !tcp->ack || tcp->syn)
		return TC_ACT_UNSPEC;
	count(CNT_ECE_ACKS);
	if (bpf_get_prandom_u32() >= assoc_below)
		return TC_ACT_UNSPEC;
	f.saddr = ip->daddr;
	f.daddr = ip->saddr;
	f.sport = tcp->dest;
	f.dport = tcp->source;
	f.proto = IPPROTO_TCP;
	now = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&assoc, &f, &now, BPF_NOEXIST) == 0)
		count(CNT_ASSOCIATED);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int pacer_egress(struct __sk_buff *skb)
{
	struct iphdr *ip;
	struct tcphdr *tcp = tcp_of(skb, &ip);
	struct flow f = {};
	__u64 *last, now;

	if (!tcp)
		return TC_ACT_UNSPEC;
	f.saddr = ip->saddr;
	f.daddr = ip->daddr;
	f.sport = tcp->source;
	f.dport = tcp->dest;
	f.proto = IPPROTO_TCP;
	last = bpf_map_lookup_elem(&assoc, &f);
	if (!last)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	if (now - *last > idle_ns) {
		bpf_map_delete_elem(&assoc, &f);
		count(CNT_EXPIRED);
		return TC_ACT_UNSPEC;
	}
	*last = now;
	skb->priority = bucket_classid;
	count(CNT_PACED);
	return TC_ACT_OK;
}
