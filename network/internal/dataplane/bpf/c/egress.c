//go:build ignore

// Pod egress program, attached to the ingress hook of a node's pod bridge (where pod traffic enters the host).
// Longest-prefix lookup of the destination in `prefixes` gives a gateway group; the flow hash picks one healthy
// member by rendezvous hashing (losing a member moves only its flows); the frame is rewritten to the member's
// tunnel MAC and redirected to its tunnel device. Misses, oversize packets (the kernel path then sends ICMP
// "fragmentation needed"), TCP SYNs, ICMP and anything that is not IPv4 go on to the kernel's routing.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_BACKENDS 8

struct prefix_key {
	__u32 prefixlen;
	__u32 addr; // network byte order
};

struct backend {
	__u32 id;      // stable member id (hash of the node name): rendezvous input
	__u32 ifindex; // tunnel device
	__u32 mtu;     // inner MTU of the path; larger packets take the kernel path
	__u8 dmac[6];  // member's tunnel MAC
	__u8 smac[6];  // our tunnel device's MAC
	__u32 flags;   // BACKEND_L3: device has no L2 header (WireGuard): redirect without rewrite
};

#define BACKEND_L3 1

struct group {
	__u32 count;
	__u32 pad;
	struct backend b[MAX_BACKENDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct prefix_key);
	__type(value, __u32);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} prefixes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct group);
	__uint(max_entries, 4096);
} groups SEC(".maps");

// counters: 0 redirected, 1 miss, 2 no healthy member, 3 oversize, 4 TCP SYN left to the kernel, 5 ICMP left
// to the kernel
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 6);
} stats SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &i);
	if (v)
		*v += 1;
}

static __always_inline __u64 mix(__u64 x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

SEC("tc")
int pod_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return TC_ACT_OK;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return TC_ACT_OK;

	// ICMP takes the kernel path, so that the sender's conntrack sees the request its reply answers. A reply
	// (echo reply, or an error about a flow) that arrives through the tunnel for a request conntrack never
	// saw is INVALID, and kube-proxy's KUBE-FORWARD chain drops INVALID packets unless
	// nf_conntrack_tcp_be_liberal is set. ICMP is a trickle; the fast path is for the bulk.
	if (ip->protocol == IPPROTO_ICMP) {
		count(5);
		return TC_ACT_OK;
	}
	// TCP SYNs take the kernel path, whose MSS clamping (to the route's path MTU) then covers every flow,
	// also at gateways where later packets are redirected from one tunnel to the next. Conntrack sees each
	// connection's handshake at both ends; the segments redirected after it are not seen on the sending
	// node, which is why the node daemon sets nf_conntrack_tcp_be_liberal (kernel.Setup).
	if (ip->protocol == IPPROTO_TCP && ip->ihl == 5) {
		struct tcphdr *tcp = (void *)(ip + 1);
		if ((void *)(tcp + 1) > data_end)
			return TC_ACT_OK;
		if (tcp->syn) {
			count(4);
			return TC_ACT_OK;
		}
	}

	struct prefix_key k = {.prefixlen = 32, .addr = ip->daddr};
	__u32 *gid = bpf_map_lookup_elem(&prefixes, &k);
	if (!gid) {
		count(1);
		return TC_ACT_OK;
	}
	struct group *g = bpf_map_lookup_elem(&groups, gid);
	if (!g || g->count == 0) {
		count(2);
		return TC_ACT_SHOT; // known remote prefix without a healthy path: drop, never leak to the underlay
	}
	__u32 h = bpf_get_hash_recalc(skb);
	__u64 best_score = 0;
	int best = -1;
#pragma unroll
	for (int i = 0; i < MAX_BACKENDS; i++) {
		if (i >= g->count)
			break;
		__u64 s = mix(((__u64)h << 32) ^ g->b[i].id);
		if (best < 0 || s > best_score) {
			best = i;
			best_score = s;
		}
	}
	if (best < 0 || best >= MAX_BACKENDS)
		return TC_ACT_OK;
	struct backend *b = &g->b[best];
	// GSO packets are segmented to their (clamped) MSS on the tunnel device: only single packets are checked.
	if (skb->gso_segs <= 1 && skb->len - sizeof(struct ethhdr) > b->mtu) {
		count(3);
		return TC_ACT_OK;
	}
	if (!(b->flags & BACKEND_L3)) {
		__builtin_memcpy(eth->h_dest, b->dmac, 6);
		__builtin_memcpy(eth->h_source, b->smac, 6);
	}
	count(0);
	return bpf_redirect(b->ifindex, 0);
}

char __license[] SEC("license") = "GPL";
