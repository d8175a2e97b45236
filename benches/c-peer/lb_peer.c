/* A straightforward layer-4 load balancer on DPDK 22.11, written the way
 * the fast path of Katran or VPP's lb plugin is written: the C peer that
 * scripts/bench-throughput.sh measures next to testpmd and sluice on the
 * same devices (PEER=1).
 *
 * Per burst: parse Ethernet/IPv4/TCP, match one VIP rule (address, TCP,
 * port 80), one CRC32-C hash of the 5-tuple per packet, reused for a bulk
 * rte_hash lookup (rte_hash_lookup_with_hash_bulk) with the entry array
 * prefetched; Maglev on a miss and an insert, a timestamp refresh on a hit;
 * a prebuilt per-backend outer Ethernet/IPv4/GRE header, rte_ipv4_cksum,
 * transmit. IPv4 only, no VLAN, fragments and everything else dropped.
 *
 * Usage (EAL arguments, then ours):
 *   lb_peer <EAL args> -- --flows N [--burst 32]
 * Port 0 receives, port 1 transmits. The main lcore prints port 1's
 * transmitted packets per second as "tx-pps: N", one line a second, until
 * SIGINT or SIGTERM.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_ip.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <rte_tcp.h>

#define MAX_BURST 64
#define MAGLEV_SIZE 65537
#define N_BACKENDS 3
#define GRE_PROTO_IPV4 0x0800
#define OUTER_LEN (sizeof(struct rte_ipv4_hdr) + 4)

struct flow_key {
	uint32_t src;
	uint32_t dst;
	uint16_t sport;
	uint16_t dport;
	uint8_t proto;
	uint8_t pad[3];
};

struct flow_entry {
	uint32_t backend;
	uint64_t last_seen;
};

struct outer_header {
	struct rte_ether_hdr eth;
	struct rte_ipv4_hdr ip;
	uint16_t gre_flags;
	uint16_t gre_proto;
} __rte_packed __rte_aligned(2);

static volatile bool stopping;
static struct rte_hash *flows;
static struct flow_entry *entries;
static uint32_t maglev[MAGLEV_SIZE];
static struct outer_header outer[N_BACKENDS];
static uint32_t vip;
static uint16_t burst_size = 32;

static void on_signal(int sig)
{
	(void)sig;
	stopping = true;
}

/* Maglev's population (Eisenbud et al. 2016, pseudocode 1) over three
 * equal backends. */
static void build_maglev(void)
{
	uint32_t offset[N_BACKENDS], skip[N_BACKENDS], next[N_BACKENDS] = {0};
	uint32_t filled = 0;
	for (uint32_t b = 0; b < N_BACKENDS; b++) {
		uint32_t name = 0xc6120000u + 10 + b;
		offset[b] = rte_hash_crc_4byte(name, 0x1234) % MAGLEV_SIZE;
		skip[b] = rte_hash_crc_4byte(name, 0x5678) % (MAGLEV_SIZE - 1) + 1;
	}
	for (uint32_t i = 0; i < MAGLEV_SIZE; i++)
		maglev[i] = UINT32_MAX;
	while (filled < MAGLEV_SIZE) {
		for (uint32_t b = 0; b < N_BACKENDS && filled < MAGLEV_SIZE; b++) {
			uint32_t c;
			do {
				c = (offset[b] + next[b] * skip[b]) % MAGLEV_SIZE;
				next[b]++;
			} while (maglev[c] != UINT32_MAX);
			maglev[c] = b;
			filled++;
		}
	}
}

/* Outer headers towards 198.18.0.10-12 from 198.18.0.1, as sluice's
 * benchmark configuration has them. */
static void build_outer_headers(void)
{
	for (uint32_t b = 0; b < N_BACKENDS; b++) {
		struct outer_header *h = &outer[b];
		memset(h, 0, sizeof(*h));
		struct rte_ether_addr src = {{0x02, 0, 0, 0, 0, 0x02}};
		struct rte_ether_addr dst = {{0x02, 0, 0, 0, 0, 0x10 + b}};
		h->eth.src_addr = src;
		h->eth.dst_addr = dst;
		h->eth.ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
		h->ip.version_ihl = RTE_IPV4_VHL_DEF;
		h->ip.time_to_live = 64;
		h->ip.next_proto_id = IPPROTO_GRE;
		h->ip.src_addr = rte_cpu_to_be_32(0xc6120001u);
		h->ip.dst_addr = rte_cpu_to_be_32(0xc612000au + b);
		h->gre_proto = rte_cpu_to_be_16(GRE_PROTO_IPV4);
	}
}

static struct rte_mempool *make_pool(uint32_t mbufs)
{
	struct rte_mempool *p = rte_pktmbuf_pool_create("peer_pool", mbufs, 256, 0,
							RTE_MBUF_DEFAULT_BUF_SIZE,
							rte_socket_id());
	if (p == NULL)
		rte_exit(EXIT_FAILURE, "mempool: %s\n", rte_strerror(rte_errno));
	return p;
}

static void start_port(uint16_t port, struct rte_mempool *pool)
{
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	if (rte_eth_dev_configure(port, 1, 1, &conf) < 0 ||
	    rte_eth_rx_queue_setup(port, 0, 1024, rte_eth_dev_socket_id(port), NULL, pool) < 0 ||
	    rte_eth_tx_queue_setup(port, 0, 1024, rte_eth_dev_socket_id(port), NULL) < 0 ||
	    rte_eth_dev_start(port) < 0)
		rte_exit(EXIT_FAILURE, "port %u does not start\n", port);
}

/* The packet's flow key, or false when it is not for the VIP rule. */
static inline bool classify(struct rte_mbuf *m, struct flow_key *k)
{
	if (m->data_len < sizeof(struct rte_ether_hdr) + sizeof(struct rte_ipv4_hdr) +
				  sizeof(struct rte_tcp_hdr))
		return false;
	struct rte_ether_hdr *eth = rte_pktmbuf_mtod(m, struct rte_ether_hdr *);
	if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4))
		return false;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	if (ip->version_ihl != RTE_IPV4_VHL_DEF || ip->next_proto_id != IPPROTO_TCP ||
	    ip->dst_addr != vip || (ip->fragment_offset &
						rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)))
		return false;
	struct rte_tcp_hdr *tcp = (struct rte_tcp_hdr *)(ip + 1);
	if (tcp->dst_port != rte_cpu_to_be_16(80))
		return false;
	k->src = ip->src_addr;
	k->dst = ip->dst_addr;
	k->sport = tcp->src_port;
	k->dport = tcp->dst_port;
	k->proto = IPPROTO_TCP;
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
	return true;
}

/* Moves the inner Ethernet header's payload behind a GRE outer header. */
static inline bool encapsulate(struct rte_mbuf *m, uint32_t backend)
{
	uint16_t inner_len = m->pkt_len - sizeof(struct rte_ether_hdr);
	struct outer_header *h = (struct outer_header *)rte_pktmbuf_prepend(m, OUTER_LEN);
	if (h == NULL)
		return false;
	rte_memcpy(h, &outer[backend], sizeof(*h));
	h->ip.total_length = rte_cpu_to_be_16(inner_len + OUTER_LEN);
	h->ip.hdr_checksum = rte_ipv4_cksum(&h->ip);
	return true;
}

static int worker(void *arg)
{
	(void)arg;
	struct rte_mbuf *rx[MAX_BURST], *tx[MAX_BURST];
	struct flow_key keys[MAX_BURST];
	const void *key_ptrs[MAX_BURST];
	hash_sig_t sigs[MAX_BURST];
	int32_t pos[MAX_BURST];
	struct rte_mbuf *valid[MAX_BURST];
	for (int i = 0; i < MAX_BURST; i++)
		key_ptrs[i] = &keys[i];
	while (!stopping) {
		uint16_t n = rte_eth_rx_burst(0, 0, rx, burst_size);
		if (n == 0)
			continue;
		uint64_t now = rte_rdtsc();
		uint32_t nv = 0, nt = 0;
		for (uint16_t i = 0; i < n; i++) {
			if (classify(rx[i], &keys[nv])) {
				sigs[nv] = rte_hash_crc(&keys[nv], sizeof(struct flow_key), 0);
				valid[nv++] = rx[i];
			} else {
				rte_pktmbuf_free(rx[i]);
			}
		}
		if (nv == 0)
			continue;
		rte_hash_lookup_with_hash_bulk(flows, key_ptrs, sigs, nv, pos);
		for (uint32_t i = 0; i < nv; i++)
			if (pos[i] >= 0)
				rte_prefetch0(&entries[pos[i]]);
		for (uint32_t i = 0; i < nv; i++) {
			uint32_t backend;
			if (pos[i] >= 0) {
				entries[pos[i]].last_seen = now;
				backend = entries[pos[i]].backend;
			} else {
				backend = maglev[sigs[i] % MAGLEV_SIZE];
				int32_t p = rte_hash_add_key_with_hash(flows, &keys[i], sigs[i]);
				if (p >= 0) {
					entries[p].backend = backend;
					entries[p].last_seen = now;
				}
			}
			if (encapsulate(valid[i], backend))
				tx[nt++] = valid[i];
			else
				rte_pktmbuf_free(valid[i]);
		}
		uint16_t sent = rte_eth_tx_burst(1, 0, tx, nt);
		for (uint16_t i = sent; i < nt; i++)
			rte_pktmbuf_free(tx[i]);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int eal = rte_eal_init(argc, argv);
	if (eal < 0)
		rte_exit(EXIT_FAILURE, "EAL: %s\n", rte_strerror(rte_errno));
	argc -= eal;
	argv += eal;
	uint32_t n_flows = 100000;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--flows") == 0)
			n_flows = (uint32_t)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--burst") == 0)
			burst_size = (uint16_t)strtoul(argv[i + 1], NULL, 10);
		else
			rte_exit(EXIT_FAILURE, "unknown option %s\n", argv[i]);
	}
	if (burst_size == 0 || burst_size > MAX_BURST)
		rte_exit(EXIT_FAILURE, "--burst must be 1..%d\n", MAX_BURST);
	if (rte_eth_dev_count_avail() < 2 || rte_lcore_count() < 2)
		rte_exit(EXIT_FAILURE, "needs two ports and two lcores\n");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	vip = rte_cpu_to_be_32(0xcb00710au); /* 203.0.113.10 */
	build_maglev();
	build_outer_headers();

	/* Capacity: twice the flows, like sluice's conntrack default sizing. */
	uint32_t capacity = 2 * (n_flows > 1024 ? n_flows : 1024);
	struct rte_hash_parameters hp = {
		.name = "peer_flows",
		.entries = capacity,
		.key_len = sizeof(struct flow_key),
		.hash_func = rte_hash_crc,
		.hash_func_init_val = 0,
		.socket_id = (int)rte_socket_id(),
	};
	flows = rte_hash_create(&hp);
	entries = calloc(capacity, sizeof(*entries));
	if (flows == NULL || entries == NULL)
		rte_exit(EXIT_FAILURE, "flow table of %u entries\n", capacity);

	struct rte_mempool *pool = make_pool(n_flows + 65536);
	start_port(0, pool);
	start_port(1, pool);
	unsigned lcore = rte_get_next_lcore(-1, 1, 0);
	rte_eal_remote_launch(worker, NULL, lcore);

	struct rte_eth_stats st;
	uint64_t last = 0;
	while (!stopping) {
		sleep(1);
		rte_eth_stats_get(1, &st);
		printf("tx-pps: %lu\n", (unsigned long)(st.opackets - last));
		fflush(stdout);
		last = st.opackets;
	}
	rte_eal_mp_wait_lcore();
	rte_eth_dev_stop(0);
	rte_eth_dev_stop(1);
	rte_hash_free(flows);
	free(entries);
	rte_eal_cleanup();
	return 0;
}
