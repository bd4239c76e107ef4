// SPDX-License-Identifier: GPL-2.0
/*
 * The bytes that enter and leave every pacer's token bucket, counted where
 * the kernel queues and dequeues them, for the rate controller loop
 * (tc/pacer/loop.go). The loop reads M_r (bytes that reached the bucket)
 * and Q_tb (its backlog) from this memory each T_r instead of asking
 * netlink for the bucket class's statistics.
 *
 * qdisc_enqueue fires after a root qdisc took a packet (a packet it drops
 * fires nothing), qdisc_dequeue when it hands packets to the device. A
 * packet is in a bucket when its NIC (network namespace, ifindex) and its
 * skb->priority name a registered bucket class: HTB sends a packet whose
 * priority is one of its leaf classes to that class, and pacer_egress
 * sets the bucket's. Bytes are the qdisc's own length (qdisc_skb_cb's
 * pkt_len), the measure of HTB's counters and of the bucket's backlog.
 *
 * A bucket the loop has put to rest (its rate at the floor, nothing
 * queued) has no timer: the first packet it takes writes one record to
 * the wake ring, which wakes the loop.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

/* The kernel's types, as far as read here; CO-RE finds the fields. */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct sk_buff *next;
	struct net_device *dev;
	__u32 priority;
	char cb[48];
} __attribute__((preserve_access_index));

struct Qdisc;
struct netdev_queue;

/* Set by the Go loader before load: the minor every bucket class has. */
volatile const __u32 bucket_minor = 0;

struct bucket_key {
	__u32 netns;   /* the NIC's network namespace (its inode number) */
	__u32 ifindex;
	__u32 classid; /* the bucket's HTB class */
};

/* One registered bucket. The loop reads it through mmap. */
struct bucket {
	__u64 in;      /* bytes the bucket took in */
	__u64 out;     /* bytes it sent */
	__u32 resting; /* 1: the loop sleeps on this bucket; wake it */
	__u32 pad;
};

#define MAX_BUCKETS 4096

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_BUCKETS);
	__type(key, struct bucket_key);
	__type(value, __u32); /* index in buckets */
} bucket_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MAX_BUCKETS);
	__type(key, __u32);
	__type(value, struct bucket);
} buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} wake SEC(".maps");

/* bucket_of returns the registered bucket skb is in, or NULL. */
static __always_inline struct bucket *bucket_of(struct sk_buff *skb)
{
	struct bucket_key key = {};
	struct net_device *dev;
	__u32 *i;

	key.classid = skb->priority;
	/* Nearly every packet leaves here: no bucket minor, no lookup. */
	if ((key.classid & 0xffff) != bucket_minor)
		return NULL;
	dev = skb->dev;
	if (!dev)
		return NULL;
	key.ifindex = dev->ifindex;
	key.netns = dev->nd_net.net->ns.inum;
	i = bpf_map_lookup_elem(&bucket_index, &key);
	if (!i)
		return NULL;
	return bpf_map_lookup_elem(&buckets, i);
}

/* pkt_len is the length the qdiscs count (qdisc_skb_cb's first field). */
static __always_inline __u64 pkt_len(struct sk_buff *skb)
{
	__u32 len = 0;

	bpf_probe_read_kernel(&len, sizeof(len), &skb->cb);
	return len;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(bucket_enqueue, struct Qdisc *q, struct netdev_queue *txq, struct sk_buff *skb)
{
	struct bucket *b = bucket_of(skb);
	__u32 slot;

	if (!b)
		return 0;
	__sync_fetch_and_add(&b->in, pkt_len(skb));
	/* Fully ordered on both sides: either the loop saw this packet's
	 * bytes before it rested, or this sees that it rests. */
	if (b->resting && __sync_lock_test_and_set(&b->resting, 0)) {
		slot = 1;
		bpf_ringbuf_output(&wake, &slot, sizeof(slot), BPF_RB_FORCE_WAKEUP);
	}
	return 0;
}

/* A dequeue may hand the device a list of packets (bulk dequeue): at
 * most this many are followed. */
#define MAX_BULK 16

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(bucket_dequeue, struct Qdisc *q, struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	struct bucket *b;

	for (int i = 0; i < MAX_BULK && skb; i++) {
		b = bucket_of(skb);
		if (b)
			__sync_fetch_and_add(&b->out, pkt_len(skb));
		skb = skb->next;
	}
	return 0;
}
