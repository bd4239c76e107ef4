// SPDX-License-Identifier: GPL-2.0
/*
 * Per-port eBPF for fabric switch ports (see tc/marker.go, tc/doc.go and
 * docs/ports.md).
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
 * NDP ports (MARK_NDP, tc/ndp.go) count the queue of each band the same
 * way and, when an NDP DATA packet finds the data band full, trim it to its
 * headers and queue it in the header band (ndp_egress).
 *
 * Fair queueing (cfg->buckets > 0, tc/fair.go): each band is split into
 * hashed flow buckets, HTB classes of equal quantum under the band's class,
 * and the egress program steers each packet to the bucket of its 5-tuple.
 *
 * One object is loaded per lab; every port is a key in port_cfg, so
 * parameters change from userspace without reloading (fabric port set).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define DIR_EGRESS 0 /* key of the port's own egress hook */
#define DIR_PEER 1   /* key of the peer's ingress hook (departures, ECN) */

#define MARK_NONE 0
#define MARK_ECN 1     /* egress: threshold marker */
#define MARK_PHANTOM 2 /* phantom queue, decided at xmit, applied at the peer */
#define MARK_DEPART 3  /* peer hook: count departures of the owner's counted port */
#define MARK_NDP 4     /* egress: NDP trimming; no ECN marks */

#define MAX_BANDS 8

/* HTB class minors (tc/apply.go, tc/fair.go): band b is 1:(0x10+b); with
 * flow buckets, bucket i of band b is 1:((b+1)<<8 | i). */
#define LEAF_BASE 0x10
#define BUCKET_BASE 0x100

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
	__u32 buckets;    /* flow buckets per band (0: no fair queueing) */
	__u64 stale_ns;   /* counted ports: no departure for this long means the port is idle */
	__u8 band_of[8];  /* DSCP class selector (dscp >> 3) -> band */
	struct port_key owner; /* MARK_DEPART: the egress port these packets left */
	__u64 wire_Bps;   /* PQ: the port rate, at which a real wire delivers packets */
	/* Counted ports (ECN, NDP): the limit of each band's fifo that arrivals
	 * are checked against, in bytes and in packets (0: none). */
	__u32 cap_bytes[MAX_BANDS];
	__u32 cap_pkts[MAX_BANDS];
	__u32 drops_seen; /* port_drop counts this port's qdisc drops as departures */
	__u32 owner_ndp;  /* MARK_DEPART: the owner is an NDP port (classify as it does) */
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
	/* The same four counts in packets (NDP bounds its data queue in packets). */
	__u64 arrived_pkts[MAX_BANDS];
	__u64 departed_pkts[MAX_BANDS];
	__u64 arrived_peer_pkts[MAX_BANDS];
	__u64 missed_pkts[MAX_BANDS];
	__u64 vq_pkts;      /* NDP: the data band's queue in packets at the last packet */
	__u64 vq_max_pkts;
	/* Packets of band b the qdisc dropped, seen by port_drop (ports with
	 * drops_seen): they left the fifo without reaching port_xmit. */
	__u64 dropped[MAX_BANDS];
	__u64 dropped_pkts[MAX_BANDS];
	__u64 trimmed;      /* NDP: DATA packets cut to their headers */
	__u64 trim_failed;  /* NDP: DATA packets that found the data band full and could not be trimmed (dropped) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct port_key);
	__type(value, struct port_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} port_cfgs SEC(".maps");

/* Hash maps are preallocated: 16384 states of ~650 bytes are ~11 MB of
 * kernel memory per lab, for up to 16384 counted ports (a k = 16 fat tree
 * has 5120 switch ports). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
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

/* band_for is the band of a packet by its DSCP: what port_egress steers
 * HTB to, and what port_peer attributes a departure to. */
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
 * NDP (Handley et al., SIGCOMM 2017) over UDP, the wire format fabric's
 * NDP transport uses: the UDP payload starts with a 20-byte NDP header,
 * byte 0 the magic 'N', byte 1 the flags. DATA packets carry DSCP 0,
 * control packets (ACK, NACK, PULL) DSCP CS7.
 */
#define NDP_MAGIC 0x4E
#define NDP_DATA 0x01
#define NDP_CHOPPED 0x10
#define NDP_HDR_LEN 20
#define NDP_TRIMMED_IP_LEN (20 + 8 + NDP_HDR_LEN) /* IPv4 without options + UDP + NDP */
#define DSCP_CS7 56
#define NDP_HEADER_BAND 0 /* tc/ndp.go: band 0 holds headers, band 1 data */
#define NDP_DATA_BAND 1

struct ndp_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	__u8 ndp[NDP_HDR_LEN];
} __attribute__((packed));

#define IP_OFF ETH_HLEN
#define IP_TOS_OFF (IP_OFF + 1)
#define IP_LEN_OFF (IP_OFF + 2)
#define IP_CSUM_OFF (IP_OFF + 10)
#define UDP_OFF (IP_OFF + 20)
#define UDP_CSUM_OFF (UDP_OFF + 6)
#define NDP_OFF (UDP_OFF + 8)

/* ndp_parse reads the headers of a packet and returns its NDP flags, or -1
 * when it is not an NDP packet that trimming may touch: not IPv4/UDP, a
 * fragment, an IP header with options (the trimmed length assumes none),
 * or a UDP payload that does not start with an NDP header. */
static __always_inline int ndp_parse(struct __sk_buff *skb, struct ndp_frame *f)
{
	if (bpf_skb_load_bytes(skb, 0, f, sizeof(*f)))
		return -1; /* shorter than an NDP header packet */
	if (f->eth.h_proto != bpf_htons(ETH_P_IP) || f->ip.ihl != 5 || f->ip.protocol != IPPROTO_UDP)
		return -1;
	if (f->ip.frag_off & bpf_htons(0x3fff)) /* more fragments, or an offset */
		return -1;
	if (bpf_ntohs(f->udp.len) < sizeof(f->udp) + NDP_HDR_LEN || f->ndp[0] != NDP_MAGIC)
		return -1;
	return f->ndp[1];
}

/* ndp_band: NDP DATA goes to the data band, headers (CHOPPED) and control
 * packets to the header band, anything else by its DSCP. */
static __always_inline __u32 ndp_band(struct __sk_buff *skb, const struct port_cfg *cfg, int flags)
{
	if (flags < 0)
		return band_for(skb, cfg);
	if ((flags & NDP_DATA) && !(flags & NDP_CHOPPED))
		return NDP_DATA_BAND;
	return NDP_HEADER_BAND;
}

/* classify is the band of a packet on a port, NDP (ndp = 1) or not: the
 * peer attributes departures to bands as the egress hook chose them. */
static __always_inline __u32 classify(struct __sk_buff *skb, const struct port_cfg *cfg, int ndp)
{
	if (ndp) {
		struct ndp_frame f;
		return ndp_band(skb, cfg, ndp_parse(skb, &f));
	}
	return band_for(skb, cfg);
}

/* csum_fold16 folds a 32-bit one's complement sum to 16 bits. */
static __always_inline __u16 csum_fold16(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/* The UDP checksum's input for a trimmed packet: the IPv4 pseudo-header
 * (RFC 768) followed by the 28 bytes of UDP and NDP header that are all
 * that is left of its datagram. 40 bytes, a multiple of 4 as bpf_csum_diff
 * wants. */
struct ndp_trimmed_csum {
	__be32 saddr, daddr;
	__u8 zero, protocol;
	__be16 udp_len;
	struct udphdr udp;
	__u8 ndp[NDP_HDR_LEN];
};

/*
 * ndp_udp_csum makes the trimmed packet's UDP checksum valid, whatever the
 * kernel's checksum state of the skb (which a tc program cannot read):
 *   - CHECKSUM_PARTIAL (a local sender's packet on a veth: the field holds
 *     the pseudo-header sum and whoever needs the checksum, a NIC, or a
 *     delay line's NFQUEUE through skb_checksum_help, completes it over
 *     the bytes from the UDP header on). The field must then hold the
 *     pseudo-header sum for the new UDP length, seed.
 *   - CHECKSUM_NONE or UNNECESSARY (the checksum was completed upstream,
 *     e.g. by a delay line before this port): the field must hold the full
 *     checksum of the 28 bytes left, full.
 * It writes seed, then asks bpf_l4_csum_replace for a non-pseudo-header
 * change of seed into full: the kernel applies it when the skb is not
 * CHECKSUM_PARTIAL and leaves the field alone when it is
 * (inet_proto_csum_replace_by_diff), so the field ends as each state needs.
 * Zeroing the field instead (no checksum, legal for UDP over IPv4) breaks
 * the partial case: the completion then misses the pseudo-header, and the
 * receiver drops every trimmed header as a checksum error.
 */
static __always_inline int ndp_udp_csum(struct __sk_buff *skb, struct ndp_trimmed_csum *c)
{
	__s64 pseudo = bpf_csum_diff(0, 0, (__be32 *)c, 12, 0);
	__s64 all = bpf_csum_diff(0, 0, (__be32 *)c, sizeof(*c), 0);
	if (pseudo < 0 || all < 0)
		return -1;
	__u16 seed = csum_fold16(pseudo);
	__u16 full = ~csum_fold16(all);
	if (full == 0)
		full = 0xffff; /* RFC 768: a computed 0 is sent as all ones */
	if (bpf_skb_store_bytes(skb, UDP_CSUM_OFF, &seed, 2, 0))
		return -1;
	/* The kernel sets field = ~(diff + ~field): diff = ~full + seed. */
	__u32 diff = (__u16)~full + (__u32)seed;
	return bpf_l4_csum_replace(skb, UDP_CSUM_OFF, 0, diff, 0) ? -1 : 0;
}

/*
 * ndp_trim cuts a DATA packet to its headers, as an NDP switch does when the
 * data queue is full (NDP §3.1): IP (20) + UDP (8) + NDP (20) = 48 bytes.
 * It sets CHOPPED so that the receiver knows, DSCP CS7 (the ECN bits stay),
 * IP tot_len with the checksum updated, UDP length 28 and a UDP checksum
 * valid for the 28 bytes left (ndp_udp_csum). bpf_skb_change_tail may
 * reallocate the packet, so everything after it is written by offset. f
 * holds the headers as ndp_parse read them.
 */
static __always_inline int ndp_trim(struct __sk_buff *skb, const struct ndp_frame *f)
{
	if (bpf_skb_change_tail(skb, ETH_HLEN + NDP_TRIMMED_IP_LEN, 0))
		return -1;
	/* The first 16-bit word of the IP header is version/IHL and TOS. */
	__u8 vihl = ((const __u8 *)f)[IP_OFF];
	__u8 tos = (DSCP_CS7 << 2) | (f->ip.tos & 3);
	__u8 old_bytes[2] = {vihl, f->ip.tos}, new_bytes[2] = {vihl, tos};
	__u16 old_word, new_word;
	__builtin_memcpy(&old_word, old_bytes, 2);
	__builtin_memcpy(&new_word, new_bytes, 2);
	__be16 new_len = bpf_htons(NDP_TRIMMED_IP_LEN);
	if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_word, new_word, 2) ||
	    bpf_l3_csum_replace(skb, IP_CSUM_OFF, f->ip.tot_len, new_len, 2))
		return -1;
	if (bpf_skb_store_bytes(skb, IP_TOS_OFF, &tos, 1, 0) ||
	    bpf_skb_store_bytes(skb, IP_LEN_OFF, &new_len, 2, 0))
		return -1;
	struct ndp_trimmed_csum c = {
		.saddr = f->ip.saddr, .daddr = f->ip.daddr, .protocol = IPPROTO_UDP,
		.udp_len = bpf_htons(NDP_TRIMMED_IP_LEN - 20),
		.udp = {.source = f->udp.source, .dest = f->udp.dest,
			.len = bpf_htons(NDP_TRIMMED_IP_LEN - 20), .check = 0},
	};
	__builtin_memcpy(c.ndp, f->ndp, NDP_HDR_LEN);
	c.ndp[1] |= NDP_CHOPPED;
	if (bpf_skb_store_bytes(skb, UDP_OFF, &c.udp, sizeof(c.udp), 0) ||
	    bpf_skb_store_bytes(skb, NDP_OFF + 1, &c.ndp[1], 1, 0))
		return -1;
	return ndp_udp_csum(skb, &c);
}

/*
 * Fair queueing: the flow bucket of a packet is a hash of its 5-tuple
 * (addresses, protocol, and for TCP/UDP the ports) modulo the number of
 * buckets. The mixing function is Chris Wellons' "lowbias32" integer hash
 * (github.com/skeeto/hash-prospector); tc.FlowBucket computes the same in
 * Go. Fragments hash without ports, so all of a datagram stays together.
 */
static __always_inline __u32 mix32(__u32 x)
{
	x ^= x >> 16;
	x *= 0x7feb352d;
	x ^= x >> 15;
	x *= 0x846ca68b;
	x ^= x >> 16;
	return x;
}

static __always_inline __u32 flow_hash(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u32 h, ports = 0;
	__u8 proto;
	void *l4;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return 0;
		h = mix32(mix32(ip->saddr) ^ ip->daddr);
		proto = ip->protocol;
		if (ip->frag_off & bpf_htons(0x3fff))
			return mix32(h ^ proto);
		l4 = (void *)ip + ((__u32)ip->ihl & 0xf) * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		h = 0;
		for (int i = 0; i < 4; i++)
			h = mix32(h ^ ip6->saddr.in6_u.u6_addr32[i]);
		for (int i = 0; i < 4; i++)
			h = mix32(h ^ ip6->daddr.in6_u.u6_addr32[i]);
		proto = ip6->nexthdr; /* extension headers: hashed without ports */
		l4 = ip6 + 1;
	} else {
		return mix32(eth->h_proto);
	}
	if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
		if (l4 + 4 <= end)
			ports = *(__u32 *)l4;
	}
	return mix32(h ^ ports ^ proto);
}

/* class_of is the HTB class (skb->priority) of band, or of the packet's
 * flow bucket in band. */
static __always_inline __u32 class_of(struct __sk_buff *skb, const struct port_cfg *cfg, __u32 band)
{
	__u32 minor = LEAF_BASE + band;
	if (cfg->buckets)
		minor = ((band + 1) << 8) | (flow_hash(skb) % cfg->buckets);
	return (1 << 16) | minor;
}

/* band_of_class inverts class_of for port_xmit and port_drop. */
static __always_inline __u32 band_of_class(__u32 priority)
{
	__u32 minor = priority & 0xffff;
	if (minor >= BUCKET_BASE)
		return ((minor >> 8) - 1) & (MAX_BANDS - 1);
	return (minor - LEAF_BASE) & (MAX_BANDS - 1);
}

/* A band's queue as counted: bytes and packets. */
struct depth {
	__u64 bytes, pkts;
};

/*
 * band_depth is band's queue now: what entered its fifo minus what left
 * (call with st->lock held). The counts come from three places:
 * port_egress counts arrivals, port_xmit departures at the
 * net_dev_start_xmit tracepoint, port_peer arrivals at the far end.
 *
 * port_xmit misses a packet now and then (0.02-0.2 %: the tracepoint
 * program does not run when it fires inside itself on one CPU); the peer
 * sees every packet but late, after the CPU backlog that follows a veth.
 * Both are lower bounds of the departures, and so is xmit plus the misses
 * learnt so far, max(peer - xmit): the peer overtakes xmit only by missed
 * packets. Using the peer count directly would add the CPU backlog (tens
 * of KB at 1 Gbit) to the queue.
 *
 * Arrivals below departures mean an arrival was not counted that the fifo
 * took (see count_in): the band resyncs. A port that has sent nothing for
 * stale_ns while we think it holds a queue has lost a packet after its
 * qdisc (a veth drop) and is really empty.
 */
static __always_inline void band_depth(struct port_state *st, const struct port_cfg *cfg,
				       __u32 b, __u64 now, struct depth *d)
{
	b &= MAX_BANDS - 1;
	__u64 dep = st->departed[b], peer = st->arrived_peer[b];
	if (peer > dep + st->missed[b])
		st->missed[b] = peer - dep;
	dep += st->missed[b] + st->dropped[b];
	__u64 depp = st->departed_pkts[b], peerp = st->arrived_peer_pkts[b];
	if (peerp > depp + st->missed_pkts[b])
		st->missed_pkts[b] = peerp - depp;
	depp += st->missed_pkts[b] + st->dropped_pkts[b];

	int stale = st->last_depart_ns && now > st->last_depart_ns + cfg->stale_ns &&
		    now > st->last_ns + cfg->stale_ns;
	if (st->arrived[b] < dep || (st->arrived[b] > dep && stale))
		st->arrived[b] = dep;
	if (st->arrived_pkts[b] < depp || (st->arrived_pkts[b] > depp && stale))
		st->arrived_pkts[b] = depp;
	d->bytes = st->arrived[b] - dep;
	d->pkts = st->arrived_pkts[b] - depp;
}

/* fits says whether a packet of len fits in band's fifo behind d. */
static __always_inline int fits(const struct port_cfg *cfg, __u32 b, const struct depth *d, __u64 len)
{
	b &= MAX_BANDS - 1;
	if (cfg->cap_bytes[b] && d->bytes + len > cfg->cap_bytes[b])
		return 0;
	if (cfg->cap_pkts[b] && d->pkts + 1 > cfg->cap_pkts[b])
		return 0;
	return 1;
}

/*
 * count_in counts a packet into band's fifo if it fits (call with the lock
 * held). Drops are predicted, not seen: a packet that would overflow the
 * fifo is not counted in. The caps are the fifo limits less a few frames
 * (ECN) or the limits themselves (NDP, whose data band never overflows: a
 * DATA packet that does not fit is trimmed), so a misprediction (other
 * CPUs enqueueing between this hook and the qdisc) errs towards not
 * counting a packet the fifo took. That error corrects itself: departures
 * overtake arrivals and the band resyncs (band_depth). The opposite error,
 * counting a packet the fifo dropped, would hold the queue up for ever
 * (measured: +38 KB after 79 drops at 1 Gbit).
 */
static __always_inline int count_in(struct port_state *st, const struct port_cfg *cfg,
				    __u32 b, const struct depth *d, __u64 len)
{
	if (!fits(cfg, b, d, len))
		return 0;
	b &= MAX_BANDS - 1;
	st->arrived[b] += len;
	st->arrived_pkts[b]++;
	return 1;
}

/*
 * ecn_enqueue decides the DCTCP mark for a packet entering band's fifo and
 * counts it in: mark when the queue the packet finds is >= K. One spin lock
 * per port: arrivals on several CPUs must see and update the queue one at a
 * time for the drop prediction; departures are atomic adds from port_xmit
 * and need no lock.
 */
static __always_inline int ecn_enqueue(struct port_state *st, const struct port_cfg *cfg,
				       __u32 band, __u64 len, int ect)
{
	__u64 now = bpf_ktime_get_ns();
	struct depth d;
	int mark;

	bpf_spin_lock(&st->lock);
	band_depth(st, cfg, band, now, &d);
	mark = d.bytes >= cfg->threshold;
	count_in(st, cfg, band, &d, len);
	st->vq = d.bytes;
	if (d.bytes > st->vq_max)
		st->vq_max = d.bytes;
	st->last_ns = now;
	st->packets++;
	st->bytes += len;
	st->ect += ect;
	bpf_spin_unlock(&st->lock);
	return mark;
}

/*
 * ndp_enqueue counts a packet into band and says whether it was counted.
 * For a DATA packet (data = 1) that does not fit in the data band it
 * returns 0 without counting: the caller trims it. vq/vq_pkts record the
 * data band's queue as the last packet found it.
 */
static __always_inline int ndp_enqueue(struct port_state *st, const struct port_cfg *cfg,
				       __u32 band, __u64 len)
{
	__u64 now = bpf_ktime_get_ns();
	struct depth d;
	int in;

	bpf_spin_lock(&st->lock);
	band_depth(st, cfg, band, now, &d);
	in = count_in(st, cfg, band, &d, len);
	if (band == NDP_DATA_BAND) {
		st->vq = d.bytes;
		st->vq_pkts = d.pkts;
		if (in) {
			d.bytes += len;
			d.pkts++;
		}
		if (d.bytes > st->vq_max)
			st->vq_max = d.bytes;
		if (d.pkts > st->vq_max_pkts)
			st->vq_max_pkts = d.pkts;
	}
	st->last_ns = now;
	st->packets++;
	st->bytes += len;
	bpf_spin_unlock(&st->lock);
	return in;
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

/*
 * ndp_egress runs an NDP port: classify (DATA to the data band, headers and
 * control to the header band, other traffic by DSCP), count the packet into
 * its band, and trim a DATA packet that finds the data band full (its
 * count, in bytes or packets, at the bound), then send the header through
 * the port again, which queues it in the header band. A header band that is full drops at its fifo (counted by tc).
 * The paper's switch trims either the arrival or the packet at the data
 * queue's tail, with probability 1/2 each, to break phase effects (§3.1);
 * at tc egress the queued packets are out of reach, so only the arrival
 * is trimmed (tc/doc.go).
 */
static __always_inline int ndp_egress(struct __sk_buff *skb, const struct port_cfg *cfg,
				      struct port_key *key)
{
	struct ndp_frame f;
	int flags = ndp_parse(skb, &f);
	__u32 band = ndp_band(skb, cfg, flags);
	struct port_state *st = bpf_map_lookup_elem(&port_states, key);

	if (st && !ndp_enqueue(st, cfg, band, skb->len) && band == NDP_DATA_BAND && flags >= 0) {
		if (ndp_trim(skb, &f)) {
			/* It cannot be queued whole (the band is full) nor as a
			 * header: dropped, and counted as a data drop. */
			__sync_fetch_and_add(&st->trim_failed, 1);
			return TC_ACT_SHOT;
		}
		__sync_fetch_and_add(&st->trimmed, 1);
		/* The qdisc took the packet's length before this hook ran
		 * (qdisc_pkt_len_init in __dev_queue_xmit) and no helper
		 * updates it, so a header queued now would be charged as
		 * the whole packet: HTB would spend a full packet's time of
		 * the port on 62 bytes and the header fifo would count it
		 * whole (measured: 51 trimmed 1514-byte frames counted as
		 * 77214 bytes). Sent through the port's egress again, the
		 * header is measured afresh, and this hook, seeing CHOPPED,
		 * counts and queues it in the header band. */
		return bpf_redirect(skb->ifindex, 0);
	}
	skb->priority = class_of(skb, cfg, band);
	return TC_ACT_OK;
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
	if (cfg->marker == MARK_NDP)
		return ndp_egress(skb, cfg, &key);
	__u32 band = band_for(skb, cfg);
	if (cfg->bands > 1 || cfg->buckets)
		skb->priority = class_of(skb, cfg, band); /* HTB class, tc/apply.go */
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
		if (st) {
			/* cfg carries the owner's classification. */
			__u32 b = classify(ctx, cfg, cfg->owner_ndp) & (MAX_BANDS - 1);
			/* tc ingress pushes the MAC header back: len is the frame. */
			__sync_fetch_and_add(&st->arrived_peer[b], ctx->len);
			__sync_fetch_and_add(&st->arrived_peer_pkts[b], 1);
		}
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
 * fires when the qdisc hands a packet to the driver. For a counted port
 * (ECN, NDP) it counts the departure (the band comes from skb->priority,
 * which port_egress set to the band's or bucket's HTB class); for a phantom
 * port it runs the counter. It fires for every device on the machine, so it
 * does one hash lookup and leaves.
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

static __always_inline int counted(const struct port_cfg *cfg)
{
	return cfg->marker == MARK_ECN || cfg->marker == MARK_NDP;
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
	if (!counted(cfg))
		return 0;
	__u32 band = 0;
	if (cfg->bands > 1 || cfg->buckets)
		band = band_of_class(skb->priority);
	__sync_fetch_and_add(&st->departed[band], skb->len);
	__sync_fetch_and_add(&st->departed_pkts[band], 1);
	st->last_depart_ns = bpf_ktime_get_ns();
	return 0;
}

/*
 * port_drop sees packets freed as dropped (the kfree_skb tracepoint). For a
 * counted port whose fifos cannot be predicted by a band-wide cap (flow
 * buckets split the band's buffer, so a bucket overflows while the band
 * has room) it counts each qdisc drop: the packet was counted in at the
 * egress hook and has left the fifo. It is attached only
 * to labs with such ports (tc/marker.go). The drop reasons come from the
 * running kernel's BTF (CO-RE enum relocations).
 */
enum skb_drop_reason {
	SKB_DROP_REASON_QDISC_DROP,
	SKB_DROP_REASON_QDISC_OVERLIMIT,
	SKB_DROP_REASON_QDISC_CONGESTED,
};

static __always_inline int qdisc_drop_reason(__u64 reason)
{
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_DROP_REASON_QDISC_DROP) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_QDISC_DROP))
		return 1;
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_DROP_REASON_QDISC_OVERLIMIT) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_QDISC_OVERLIMIT))
		return 1;
	if (bpf_core_enum_value_exists(enum skb_drop_reason, SKB_DROP_REASON_QDISC_CONGESTED) &&
	    reason == bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_QDISC_CONGESTED))
		return 1;
	return 0;
}

SEC("tp_btf/kfree_skb")
int port_drop(__u64 *ctx)
{
	struct sk_buff *skb = (struct sk_buff *)ctx[0];
	if (!qdisc_drop_reason(ctx[2]))
		return 0;
	struct net_device *dev = skb->dev;
	if (!dev)
		return 0;
	struct port_key key = {
		.netns_cookie = dev->nd_net.net->net_cookie,
		.ifindex = dev->ifindex,
		.dir = DIR_EGRESS,
	};
	struct port_cfg *cfg = bpf_map_lookup_elem(&port_cfgs, &key);
	if (!cfg || !cfg->drops_seen || !counted(cfg))
		return 0;
	struct port_state *st = bpf_map_lookup_elem(&port_states, &key);
	if (!st)
		return 0;
	__u32 band = 0;
	if (cfg->bands > 1 || cfg->buckets)
		band = band_of_class(skb->priority);
	/* Kept apart from departed: the peer's count corrects port_xmit's
	 * misses by how far it runs ahead of departed, and dropped packets
	 * never reach the peer. */
	__sync_fetch_and_add(&st->dropped[band], skb->len);
	__sync_fetch_and_add(&st->dropped_pkts[band], 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
