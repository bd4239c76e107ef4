// SPDX-License-Identifier: GPL-2.0
/*
 * Test fixture: a random ECN marker. Sets CE on a configurable fraction of
 * the ECN-capable TCP segments that carry data, so a test can feed a
 * congestion control a known marking probability without a queue.
 * Attached as a tc (cls_bpf, direct-action) program.
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

/* A data segment is marked when a random u32 is below this. Set at load. */
volatile const __u32 mark_below = 0;

/* Counters, read by the test: [0] ECT data segments seen, [1] marked. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&counts, &i);

	if (c)
		__sync_fetch_and_add(c, 1);
}

SEC("tc")
int cemark(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *tcp;
	__u32 ihl, payload;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (ip->protocol != IPPROTO_TCP || (ip->tos & 3) == 0)
		return TC_ACT_OK;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return TC_ACT_OK;
	tcp = (void *)ip + ihl;
	if ((void *)(tcp + 1) > end)
		return TC_ACT_OK;
	payload = bpf_ntohs(ip->tot_len) - ihl - tcp->doff * 4;
	if ((__s32)payload <= 0)
		return TC_ACT_OK;
	count(0);
	if (bpf_get_prandom_u32() < mark_below && bpf_skb_ecn_set_ce(skb))
		count(1);
	return TC_ACT_OK;
}
