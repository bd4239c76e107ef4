// SPDX-License-Identifier: GPL-2.0
/*
 * Per-port eBPF for fabric switch ports (see tc/marker.go and DESIGN.md
 * "Mechanisms, precisely").
 *
 * port_egress runs at clsact egress of a port, before the qdisc:
 *   - it classifies by DSCP into an HTB band by setting skb->priority to the
 *     band's class id (HTB looks skb->priority up as a class id before any
 *     filter; veth clears priority, so every port classifies again);
 *   - it runs the DCTCP threshold marker: a virtual queue drained at the port
 *     rate models the FIFO that HTB drains at that rate; CE on ECT when the
 *     virtual queue is >= K at enqueue.
 *
 * port_phantom runs at tc ingress of the veth peer, i.e. on packets that have
 * left the port's queue at line rate: HULL's phantom queue (§2.1), a counter
 * drained at gamma*C that marks CE above its threshold and never drops.
 *
 * One object is loaded per lab; every port is a key in port_cfg, so
 * parameters change from userspace without reloading (fabric port set).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define DIR_EGRESS 0  /* key of the port's own egress hook */
#define DIR_PHANTOM 1 /* key of the peer's ingress hook */

#define MARK_NONE 0
#define MARK_ECN 1
#define MARK_PHANTOM 2

#define NSEC_PER_SEC 1000000000ULL

/*
 * A port is identified by its namespace and interface: ifindex alone repeats
 * across namespaces. The netns cookie is unique for the kernel's lifetime.
 * bpf_get_netns_cookie(skb) will not do: for a packet without a socket (every
 * forwarded packet) it returns the initial namespace's cookie. So the cookie
 * is read from the device the packet is on, skb->dev->nd_net.net->net_cookie,
 * with CO-RE so the offsets come from the running kernel's BTF.
 */
struct net {
	__u64 net_cookie;
} __attribute__((preserve_access_index));

struct net_device {
	struct {
		struct net *net;
	} nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

static __always_inline __u64 dev_netns_cookie(struct __sk_buff *ctx)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);
	return BPF_CORE_READ(skb, dev, nd_net.net, net_cookie);
}

struct port_key {
	__u64 netns_cookie;
	__u32 ifindex;
	__u32 dir;
};

/* Written by userspace only; replaced atomically as a whole map value. */
struct port_cfg {
	__u32 marker;     /* MARK_* */
	__u32 bands;      /* 0: do not classify */
	__u64 drain_Bps;  /* bytes/s the virtual queue drains at */
	__u32 threshold;  /* bytes; ECN: mark when vq >= K; PQ: when vq > K */
	__u32 cap;        /* bytes; ECN vq never exceeds the real buffer (0: none) */
	__u8 band_of[8];  /* DSCP class selector (dscp >> 3) -> band */
};

/* Written by the programs under the lock; read by userspace with BPF_F_LOCK. */
struct port_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 vq;       /* virtual queue, bytes */
	__u64 last_ns;  /* bpf_ktime_get_ns of the last update */
	__u64 packets;  /* packets seen by the marker */
	__u64 bytes;
	__u64 ect;      /* ECT packets seen */
	__u64 marks;    /* CE marks set */
	__u64 vq_max;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct port_key);
	__type(value, struct port_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} port_cfgs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct port_key);
	__type(value, struct port_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} port_states SEC(".maps");

/* ip_tos returns the IPv4 TOS / IPv6 traffic class byte (DSCP << 2 | ECN),
 * or -1 for other packets. */
static __always_inline int ip_tos(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return -1;
		return ip->tos;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return -1;
		return (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	}
	return -1;
}

/*
 * vq_update drains the virtual queue for the time since the last packet,
 * then decides the mark and adds the packet. It returns 1 when the packet
 * should be marked. One spin lock per port: vq and last_ns must move together,
 * and packets of one port arrive on several CPUs at once.
 */
static __always_inline int vq_update(struct port_state *st, const struct port_cfg *cfg,
				     __u64 len, int ect)
{
	__u64 now = bpf_ktime_get_ns();
	int mark = 0;

	bpf_spin_lock(&st->lock);
	if (st->last_ns && now > st->last_ns) {
		__u64 dt = now - st->last_ns;
		if (dt >= NSEC_PER_SEC) {
			st->vq = 0; /* a second of drain empties any real buffer */
		} else {
			__u64 drained = cfg->drain_Bps * dt / NSEC_PER_SEC;
			st->vq = st->vq > drained ? st->vq - drained : 0;
		}
	}
	/* Truncating the drain loses under one byte per packet. */
	if (now > st->last_ns)
		st->last_ns = now;
	if (cfg->marker == MARK_ECN) {
		mark = st->vq >= cfg->threshold;
		/* A packet the real FIFO would drop never enters it. */
		if (!cfg->cap || st->vq + len <= cfg->cap)
			st->vq += len;
	} else {
		st->vq += len;
		mark = st->vq > cfg->threshold;
	}
	if (st->vq > st->vq_max)
		st->vq_max = st->vq;
	st->packets++;
	st->bytes += len;
	st->ect += ect;
	bpf_spin_unlock(&st->lock);
	return mark;
}

static __always_inline void run_marker(struct __sk_buff *skb, struct port_key *key,
				       const struct port_cfg *cfg, __u64 len)
{
	struct port_state *st = bpf_map_lookup_elem(&port_states, key);
	if (!st)
		return;
	int tos = ip_tos(skb);
	int ect = tos >= 0 && (tos & 3) != 0;
	/* The counter counts every packet; only ECT ones can carry the mark
	 * (bpf_skb_ecn_set_ce leaves Not-ECT packets alone). */
	if (vq_update(st, cfg, len, ect) && ect && bpf_skb_ecn_set_ce(skb))
		__sync_fetch_and_add(&st->marks, 1);
}

SEC("tc")
int port_egress(struct __sk_buff *skb)
{
	struct port_key key = {
		.netns_cookie = dev_netns_cookie(skb),
		.ifindex = skb->ifindex,
		.dir = DIR_EGRESS,
	};
	struct port_cfg *cfg = bpf_map_lookup_elem(&port_cfgs, &key);
	if (!cfg)
		return TC_ACT_OK;
	if (cfg->bands) {
		int tos = ip_tos(skb);
		__u32 band = cfg->bands - 1; /* non-IP traffic: lowest band */
		if (tos >= 0)
			band = cfg->band_of[(tos >> 5) & 7]; /* class selector = DSCP >> 3 */
		/* HTB class 1:(0x10+band), see tc/apply.go */
		skb->priority = (1 << 16) | (0x10 + band);
	}
	if (cfg->marker == MARK_ECN)
		run_marker(skb, &key, cfg, skb->len);
	return TC_ACT_OK;
}

SEC("tc")
int port_phantom(struct __sk_buff *skb)
{
	struct port_key key = {
		.netns_cookie = dev_netns_cookie(skb),
		.ifindex = skb->ifindex,
		.dir = DIR_PHANTOM,
	};
	struct port_cfg *cfg = bpf_map_lookup_elem(&port_cfgs, &key);
	if (!cfg || cfg->marker != MARK_PHANTOM)
		return TC_ACT_OK;
	/* At ingress the Ethernet header is already pulled from skb->len; count
	 * it so both markers measure the bytes the qdisc (and the wire) sees. */
	run_marker(skb, &key, cfg, skb->len + ETH_HLEN);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
