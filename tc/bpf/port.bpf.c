// SPDX-License-Identifier: GPL-2.0
/*
 * Per-port eBPF for fabric switch ports (see tc/marker.go and DESIGN.md
 * "Mechanisms, precisely").
 *
 * port_egress runs at clsact egress of a port, before the qdisc:
 *   - it classifies by DSCP into an HTB band by setting skb->priority to the
 *     band's class id (HTB looks skb->priority up as a class id before any
 *     filter; veth clears priority, so every port classifies again);
 *   - it runs the DCTCP threshold marker: CE on ECT when the band's queue is
 *     >= K at enqueue. eBPF cannot read the qdisc backlog, so the queue is
 *     counted: bytes entering the fifo here, minus bytes the qdisc hands to
 *     the driver (port_xmit, at the net_dev_start_xmit tracepoint).
 *
 * HULL's phantom queue (§2.1), "a bump on the wire", is a counter drained
 * at gamma*C that marks CE above its threshold and never drops or delays.
 * It must see packets as they leave the port. port_xmit runs the counter at
 * that moment (net_dev_start_xmit); it cannot write the packet, so it
 * leaves the decision in phantom_marks under the skb's address, and
 * port_peer, at tc ingress of the veth peer, sets CE. Running the counter at
 * the peer's ingress instead would time packets after the CPU backlog that
 * follows a veth, which on a busy machine releases them in batches: at 85 %
 * load the counter then reached 139 KB and marked 36 % of the packets.
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

#define DIR_EGRESS 0 /* key of the port's own egress hook */
#define DIR_PEER 1   /* key of the peer's ingress hook (departures, ECN) */

#define MARK_NONE 0
#define MARK_ECN 1     /* egress: threshold marker */
#define MARK_PHANTOM 2 /* phantom queue, decided at xmit, applied at the peer */
#define MARK_DEPART 3  /* peer hook: count departures of the owner's ECN port */

#define MAX_BANDS 8

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
	int ifindex;
	struct {
		struct net *net;
	} nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
	unsigned int len;
	__u32 priority;
	unsigned char *head;
	__u16 network_header;
	__u16 protocol;
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
	__u32 cap;        /* bytes; ECN: a band's fifo limit (0: none) */
	__u64 stale_ns;   /* ECN: no departure for this long means the port is idle */
	__u8 band_of[8];  /* DSCP class selector (dscp >> 3) -> band */
	struct port_key owner; /* MARK_DEPART: the egress port these packets left */
	__u64 wire_Bps;   /* PQ: the port rate, at which a real wire delivers packets */
};

/* Written by the programs under the lock; read by userspace with BPF_F_LOCK. */
struct port_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 vq;       /* phantom: the counter; ECN: the band's queue at the last packet */
	__u64 last_ns;  /* bpf_ktime_get_ns of the last update */
	__u64 packets;  /* packets seen by the marker */
	__u64 bytes;
	__u64 ect;      /* ECT packets seen */
	__u64 marks;    /* CE marks set */
	__u64 vq_max;
	__u64 arrived[MAX_BANDS];  /* ECN: bytes into band b's fifo */
	__u64 departed[MAX_BANDS]; /* ECN: bytes of band b handed to the driver (port_xmit) */
	__u64 arrived_peer[MAX_BANDS]; /* ECN: bytes of band b seen at the peer (port_peer) */
	__u64 missed[MAX_BANDS];  /* ECN: departures port_xmit is known to have missed */
	__u64 last_depart_ns;
	__u64 wire_free_ns; /* PQ: when the wire has delivered the last packet */
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

/* Mark decisions of the phantom queue, from port_xmit to port_peer, keyed by
 * the kernel address of the skb (the same skb crosses the veth). port_peer
 * deletes what it consumes; LRU evicts decisions for packets dropped on the
 * way (an address reused before eviction could mark one stray packet). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct port_key);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} phantom_marks SEC(".maps");

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

/* band_for is the band of a packet: what port_egress steers HTB to, and
 * what port_peer attributes a departure to. */
static __always_inline __u32 band_for(struct __sk_buff *skb, const struct port_cfg *cfg)
{
	if (cfg->bands <= 1)
		return 0;
	int tos = ip_tos(skb);
	if (tos < 0)
		return (cfg->bands - 1) & (MAX_BANDS - 1); /* non-IP: lowest band */
	return cfg->band_of[(tos >> 5) & 7] & (MAX_BANDS - 1); /* class selector = DSCP >> 3 */
}

static __always_inline int is_ect(struct __sk_buff *skb)
{
	int tos = ip_tos(skb);
	return tos >= 0 && (tos & 3) != 0;
}

/*
 * ecn_enqueue decides the DCTCP mark for a packet entering band's fifo and
 * counts it in. The queue is arrived - departed, the qdisc's own backlog
 * (counting departures only at the peer's ingress overstated it by the
 * packets waiting in the CPU backlog after the veth, ~10 KB).
 *
 * Drops are predicted, not seen: a packet that would overflow the fifo
 * (queue + len > cap) is not counted in. cap is the fifo limit less a few
 * frames, so a misprediction (other CPUs enqueueing between this hook and
 * the qdisc) errs towards not counting a packet the fifo took. That error
 * corrects itself: departures overtake arrivals and the band resyncs. The
 * opposite error, counting a packet the fifo dropped, would hold the queue
 * up for ever (measured: +38 KB after 79 drops at 1 Gbit). A port that has
 * sent nothing for stale_ns while we think it holds a queue is empty too.
 *
 * One spin lock per port: arrivals on several CPUs must see and update the
 * queue one at a time for the drop prediction; departures are atomic adds
 * from port_xmit and need no lock.
 */
static __always_inline int ecn_enqueue(struct port_state *st, const struct port_cfg *cfg,
				       __u32 band, __u64 len, int ect)
{
	__u64 now = bpf_ktime_get_ns();
	int mark;

	band &= MAX_BANDS - 1;
	bpf_spin_lock(&st->lock);
	/* port_xmit misses a packet now and then (0.02-0.2 %: the tracepoint
	 * program does not run when it fires inside itself on one CPU); the peer
	 * sees every packet but late, after the CPU backlog that follows a veth.
	 * Both are lower bounds of the departures, and so is xmit plus the
	 * misses learnt so far, max(peer - xmit): the peer overtakes xmit only
	 * by missed packets. Using the peer count directly would add the CPU
	 * backlog (tens of KB at 1 Gbit) to the queue. */
	__u64 dep = st->departed[band];
	__u64 peer = st->arrived_peer[band];
	if (peer > dep + st->missed[band])
		st->missed[band] = peer - dep;
	dep += st->missed[band];
	__u64 arr = st->arrived[band];
	if (arr < dep || (arr > dep && st->last_depart_ns &&
			  now > st->last_depart_ns + cfg->stale_ns &&
			  now > st->last_ns + cfg->stale_ns))
		arr = dep;
	__u64 q = arr - dep;
	mark = q >= cfg->threshold;
	if (!cfg->cap || q + len <= cfg->cap)
		arr += len;
	st->arrived[band] = arr;
	st->vq = q;
	if (q > st->vq_max)
		st->vq_max = q;
	st->last_ns = now;
	st->packets++;
	st->bytes += len;
	st->ect += ect;
	bpf_spin_unlock(&st->lock);
	return mark;
}

/*
 * phantom_update is HULL's phantom queue (§2.1): first drain,
 * vq = max(0, vq - gamma*C*dt), then mark when vq > threshold, then add the
 * packet. vq and last_ns must move together, hence the lock.
 *
 * HULL's PQ sits on the switch's egress link, where packets arrive at most
 * at the line rate C. A veth has no serialization: an idle HTB port hands
 * a burst (up to its 1 ms bucket) to the wire at once, and counted at that
 * instant it would grow the PQ by whole packets instead of (1 - gamma) of
 * each, marking flows that run far below C. So each packet is counted when
 * a real wire would deliver it: no earlier than the previous packet's
 * delivery plus its own serialization time len/C.
 */
static __always_inline int phantom_update(struct port_state *st, const struct port_cfg *cfg,
					  __u64 len, int ect)
{
	__u64 at = bpf_ktime_get_ns();
	int mark;

	bpf_spin_lock(&st->lock);
	if (cfg->wire_Bps && st->wire_free_ns > at)
		at = st->wire_free_ns;
	if (st->last_ns && at > st->last_ns) {
		__u64 dt = at - st->last_ns;
		if (dt >= NSEC_PER_SEC) {
			st->vq = 0; /* a second of drain empties any sane threshold */
		} else {
			/* Truncation loses under one byte per packet. */
			__u64 drained = cfg->drain_Bps * dt / NSEC_PER_SEC;
			st->vq = st->vq > drained ? st->vq - drained : 0;
		}
	}
	if (at > st->last_ns)
		st->last_ns = at;
	if (cfg->wire_Bps)
		st->wire_free_ns = at + len * NSEC_PER_SEC / cfg->wire_Bps;
	/* The packet is marked by the queue it finds, as at a switch's enqueue.
	 * Comparing after adding it would mark every packet of a 1.5 KB-MTU
	 * flow against HULL's 1 KB threshold, even on an idle link. */
	mark = st->vq > cfg->threshold;
	st->vq += len;
	if (st->vq > st->vq_max)
		st->vq_max = st->vq;
	st->packets++;
	st->bytes += len;
	st->ect += ect;
	bpf_spin_unlock(&st->lock);
	return mark;
}

/* mark sets CE; bpf_skb_ecn_set_ce leaves Not-ECT packets alone. */
static __always_inline void mark_ce(struct __sk_buff *skb, struct port_state *st, int ect)
{
	if (ect && bpf_skb_ecn_set_ce(skb))
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
	__u32 band = band_for(skb, cfg);
	if (cfg->bands > 1)
		skb->priority = (1 << 16) | (0x10 + band); /* HTB class 1:1b, tc/apply.go */
	if (cfg->marker == MARK_ECN) {
		struct port_state *st = bpf_map_lookup_elem(&port_states, &key);
		if (st) {
			int ect = is_ect(skb);
			if (ecn_enqueue(st, cfg, band, skb->len, ect))
				mark_ce(skb, st, ect);
		}
	}
	return TC_ACT_OK;
}

SEC("tc")
int port_peer(struct __sk_buff *ctx)
{
	struct port_key self = {
		.netns_cookie = dev_netns_cookie(ctx),
		.ifindex = ctx->ifindex,
		.dir = DIR_PEER,
	};
	struct port_cfg *cfg = bpf_map_lookup_elem(&port_cfgs, &self);
	if (cfg && cfg->marker == MARK_DEPART) {
		struct port_state *st = bpf_map_lookup_elem(&port_states, &cfg->owner);
		if (st)
			/* tc ingress pushes the MAC header back: len is the frame. */
			__sync_fetch_and_add(&st->arrived_peer[band_for(ctx, cfg)], ctx->len);
		return TC_ACT_OK;
	}
	__u64 addr = (__u64)bpf_cast_to_kern_ctx(ctx);
	struct port_key *owner = bpf_map_lookup_elem(&phantom_marks, &addr);
	if (!owner)
		return TC_ACT_OK;
	struct port_key key = *owner;
	bpf_map_delete_elem(&phantom_marks, &addr);
	struct port_state *st = bpf_map_lookup_elem(&port_states, &key);
	if (st)
		mark_ce(ctx, st, is_ect(ctx));
	return TC_ACT_OK;
}

/*
 * port_xmit sees packets leave the qdisc: the net_dev_start_xmit tracepoint
 * fires when the qdisc hands a packet to the driver. For an ECN port it
 * counts the departure (the band comes from skb->priority, which port_egress
 * set to the HTB class 1:1b); for a phantom port it runs the counter. It
 * fires for every device on the machine, so it does one hash lookup and
 * leaves.
 */
/* xmit_is_ect reads the ECN field of a departing packet from its network
 * header (the tracepoint has no packet-access helpers). */
static __always_inline int xmit_is_ect(struct sk_buff *skb)
{
	unsigned char *nh = skb->head + skb->network_header;
	__u8 b[2];

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_probe_read_kernel(b, 2, nh))
			return 0;
		return (b[1] & 3) != 0; /* TOS byte */
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_probe_read_kernel(b, 2, nh))
			return 0;
		return ((b[1] >> 4) & 3) != 0; /* traffic class straddles bytes 0-1 */
	}
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int port_xmit(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	struct net_device *dev = (struct net_device *)ctx[1];
	struct port_key key = {
		.netns_cookie = dev->nd_net.net->net_cookie,
		.ifindex = dev->ifindex,
		.dir = DIR_EGRESS,
	};
	struct port_cfg *cfg = bpf_map_lookup_elem(&port_cfgs, &key);
	if (!cfg || cfg->marker == MARK_NONE)
		return 0;
	struct port_state *st = bpf_map_lookup_elem(&port_states, &key);
	if (!st)
		return 0;
	if (cfg->marker == MARK_PHANTOM) {
		/* Not-ECT packets count too: the counter measures load. */
		if (phantom_update(st, cfg, skb->len, xmit_is_ect(skb))) {
			__u64 addr = (__u64)skb;
			bpf_map_update_elem(&phantom_marks, &addr, &key, BPF_ANY);
		}
		return 0;
	}
	__u32 band = 0;
	if (cfg->bands > 1)
		band = ((skb->priority & 0xffff) - 0x10) & (MAX_BANDS - 1);
	__sync_fetch_and_add(&st->departed[band], skb->len);
	st->last_depart_ns = bpf_ktime_get_ns();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
