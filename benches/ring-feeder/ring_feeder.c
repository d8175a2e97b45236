/* The ring harness's traffic source: a DPDK secondary process that feeds
 * the RX rings of a net_ring device in the primary (dpdk-testpmd, the C
 * peer or sluice) with the frames of one or more pcap files, so that the
 * measured worker receives packets without a copy on its own core.
 *
 * `--vdev=net_ring0` (no arguments) makes the primary create 16 rings
 * named ETH_RXTX<q>_net_ring0, each both the RX and the TX ring of queue
 * q; the worker's RX burst is then a ring dequeue of mbufs the feeder
 * already filled. The feeder, per burst and queue: takes BURST mbufs from
 * what the primary transmitted (--sink, below) or else from the
 * primary's packet pool (rte_mempool_get_bulk, through the feeder's
 * own lcore cache), resets each as a PMD's RX does (data_off at the
 * headroom, one segment, refcnt 1, port, no offload flags, no packet type,
 * the lengths), copies the next frame of the queue's templates into it
 * (round robin over every frame of the file, so that 100,000 or 1,000,000
 * flows cycle as net_pcap's infinite_rx cycles them) and enqueues the
 * burst. It only fills a burst when the ring has room for all of it, so
 * the ring stays full (1024 entries, 992 packets in bursts of 32) and
 * every RX burst is a full one or none (the ring holds whole bursts
 * only); when every ring is full it spins, or sleeps --idle-sleep
 * microseconds. Mbufs that did not fit are freed.
 *
 * --sink DEV (repeatable): the feeder takes over the TX queues of the
 * primary's net_ring device DEV, so that what the primary transmits
 * there comes back to the feeder, which recycles it into the RX rings.
 * net_ring's queue q transmits into the same ring its RX reads (and the
 * primary polls every port's RX), so the feeder points each configured TX
 * queue of DEV at a ring of its own, SINK<q>_<DEV> (4096 entries, one
 * producer: the lcore owning that TX queue). The queue's structure is
 * net_ring's, in the memory the processes share, reached through the
 * public rte_eth_fp_ops; that its first member is the ring pointer is
 * checked (it must hold ETH_RXTX<q>_<DEV>) before it is rewritten, after
 * the primary has started DEV and before the first packet is fed. The
 * worker's TX is then a ring enqueue, and its mbufs go round between it
 * and the feeder without the pool: what a NIC with fast-free TX
 * completion costs. The feeder takes a burst from the sinks first and
 * from the pool only for what they lack (a program's drops go back to the
 * pool through its own frees, as on a NIC). A program must not transmit
 * chained or indirect mbufs there: the feeder resets them as raw ones.
 *
 * Usage (EAL arguments, then ours):
 *   ring_feeder --proc-type=secondary --file-prefix=PRIMARY --lcores=7@0 \
 *     --no-pci --log-level=error -- [--pool NAME] [--dev net_ring0] \
 *     [--burst 32] [--port ID] [--wait SECONDS] [--idle-sleep US] \
 *     [--sink DEV ...] PCAP [PCAP ...]
 * PCAP number q feeds RX queue q (ETH_RXTX<q>_<dev>). The lcore id must
 * be one the primary does not use: the mempool cache the feeder takes
 * from is the one of its lcore id. --pool: the primary's pktmbuf pool
 * (default: the only pktmbuf pool the primary has). --port: the port id
 * written into each mbuf (default: the net_ring device's port id in the
 * primary). --wait: how long to wait for the primary's rings and for
 * the start of its port (only then is its pool complete: the feeder
 * finds it by name while it is still being built).
 *
 * Prints "ring_feeder: attached" (stderr) once it has found the
 * primary's device and rings. With --sink it then prints "ring-burst-functions: rx=0x... tx=0x..."
 * (stdout): the offsets of net_ring's RX and TX burst functions in their
 * shared object, as callgrind names the functions of a stripped object,
 * so that a profile of the primary can tell them apart.
 *
 * Prints "feeder-pps: N low: L nomem: M gap-us: G recycled: R" once a second (N: packets
 * enqueued in the last second, every queue; L: times so far a ring was
 * found with a burst or less in it, when its consumer may have found it
 * empty; M: times the pool had no burst to give; G: the longest time
 * between two of its passes over the rings in that second, in
 * microseconds, sleeps included; R: the share of the second's packets
 * that came back through the sinks) until SIGINT or
 * SIGTERM, or until the primary exits; then "feeder-total: N" and it
 * detaches.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rte_branch_prediction.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_memcpy.h>
#include <rte_mempool.h>
#include <rte_pause.h>
#include <rte_ring.h>

#define MAX_QUEUES 16
#define MAX_BURST 64
#define MAX_SINKS (2 * MAX_QUEUES)
#define SINK_SIZE 4096

/* The start of net_ring's queue structure (struct ring_queue in DPDK
 * 22.11's drivers/net/ring/rte_eth_ring.c): the ring it dequeues from or
 * enqueues into. take_over_tx checks it before relying on it. */
struct net_ring_queue {
	struct rte_ring *rng;
};

/* The rings the primary's taken-over TX queues transmit into. */
static struct rte_ring *sinks[MAX_SINKS];
static unsigned int nsinks;
static uint64_t recycled;

/* One queue's templates: every frame of its pcap file, each in a slot of
 * `stride` bytes, and the ring it feeds. */
struct queue {
	const char *pcap;
	uint8_t *frames;
	uint16_t *lens;
	uint32_t count;
	uint32_t stride;
	uint32_t next;
	struct rte_ring *ring;
	uint64_t enqueued;
	uint64_t low;	/* found with a burst or less in it */
	uint64_t nomem;	/* the pool had no burst to give */
};

static volatile bool stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = true;
}

static uint32_t rd32(const uint8_t *p, bool swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

/* Reads a classic pcap file (microsecond or nanosecond timestamps, either
 * byte order) into q's templates. Frames longer than max_len are an
 * error: they would not fit an mbuf of the pool. */
static void load_pcap(struct queue *q, uint32_t max_len)
{
	FILE *f = fopen(q->pcap, "rb");
	if (f == NULL)
		rte_exit(EXIT_FAILURE, "%s: %s\n", q->pcap, strerror(errno));
	if (fseek(f, 0, SEEK_END) != 0)
		rte_exit(EXIT_FAILURE, "%s: cannot seek\n", q->pcap);
	long size = ftell(f);
	rewind(f);
	if (size < 24)
		rte_exit(EXIT_FAILURE, "%s: not a pcap file\n", q->pcap);
	uint8_t *buf = malloc((size_t)size);
	if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size)
		rte_exit(EXIT_FAILURE, "%s: cannot read\n", q->pcap);
	fclose(f);

	uint32_t magic;
	memcpy(&magic, buf, 4);
	bool swap;
	if (magic == 0xa1b2c3d4u || magic == 0xa1b23c4du)
		swap = false;
	else if (magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u)
		swap = true;
	else
		rte_exit(EXIT_FAILURE, "%s: not a pcap file (magic %08x)\n", q->pcap, magic);

	/* First pass: how many frames, and the longest. */
	uint32_t count = 0, longest = 0;
	for (long off = 24; off + 16 <= size;) {
		uint32_t len = rd32(buf + off + 8, swap);
		if (off + 16 + (long)len > size)
			break;
		if (len > longest)
			longest = len;
		count++;
		off += 16 + (long)len;
	}
	if (count == 0)
		rte_exit(EXIT_FAILURE, "%s: no frames\n", q->pcap);
	if (longest > max_len)
		rte_exit(EXIT_FAILURE, "%s: a frame of %u bytes does not fit the pool's %u\n",
			 q->pcap, longest, max_len);
	q->stride = (longest + 63) & ~63u;
	q->frames = aligned_alloc(64, (size_t)q->stride * count);
	q->lens = malloc(sizeof(*q->lens) * count);
	if (q->frames == NULL || q->lens == NULL)
		rte_exit(EXIT_FAILURE, "%s: no memory for %u frames\n", q->pcap, count);
	uint32_t i = 0;
	for (long off = 24; i < count; i++) {
		uint32_t len = rd32(buf + off + 8, swap);
		memcpy(q->frames + (size_t)i * q->stride, buf + off + 16, len);
		q->lens[i] = (uint16_t)len;
		off += 16 + (long)len;
	}
	q->count = count;
	free(buf);
}

struct pool_search {
	struct rte_mempool *found;
	unsigned int n;
};

/* A pktmbuf pool: its elements are mbufs and its private area is
 * rte_pktmbuf_pool_private (what rte_pktmbuf_pool_create makes). */
static void find_pktmbuf_pool(struct rte_mempool *mp, void *arg)
{
	struct pool_search *s = arg;
	if (mp->elt_size >= sizeof(struct rte_mbuf) &&
	    mp->private_data_size >= sizeof(struct rte_pktmbuf_pool_private)) {
		fprintf(stderr, "ring_feeder: pktmbuf pool %s (%u mbufs)\n", mp->name, mp->size);
		s->found = mp;
		s->n++;
	}
}

/* The offset of a function in the shared object that holds it. */
static uintptr_t offset_in_object(void *fn)
{
	Dl_info info;
	if (dladdr(fn, &info) == 0 || info.dli_fbase == NULL)
		return 0;
	return (uintptr_t)fn - (uintptr_t)info.dli_fbase;
}

/* Points every configured TX queue of the started net_ring device dev
 * (port) at a sink ring of the feeder's (see --sink). */
static void take_over_tx(const char *dev, uint16_t port)
{
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(port, &info) != 0 || strcmp(info.driver_name, "net_ring") != 0)
		rte_exit(EXIT_FAILURE, "--sink %s: not a net_ring device\n", dev);
	void **txq = rte_eth_fp_ops[port].txq.data;
	for (unsigned int q = 0; q < info.nb_tx_queues; q++) {
		char name[RTE_RING_NAMESIZE];
		snprintf(name, sizeof(name), "ETH_RXTX%u_%s", q, dev);
		struct rte_ring *own = rte_ring_lookup(name);
		struct net_ring_queue *rq = txq != NULL ? txq[q] : NULL;
		if (own == NULL || rq == NULL || rq->rng != own)
			rte_exit(EXIT_FAILURE,
				 "--sink %s: TX queue %u does not transmit into %s as DPDK 22.11's "
				 "net_ring does; cannot take it over\n",
				 dev, q, name);
		if (nsinks == MAX_SINKS)
			rte_exit(EXIT_FAILURE, "--sink: more than %d TX queues\n", MAX_SINKS);
		snprintf(name, sizeof(name), "SINK%u_%s", q, dev);
		struct rte_ring *sink = rte_ring_create(name, SINK_SIZE, SOCKET_ID_ANY,
							RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (sink == NULL)
			rte_exit(EXIT_FAILURE, "--sink %s: ring %s: %s\n", dev, name,
				 rte_strerror(rte_errno));
		/* The primary's TX burst reads the pointer on every call. */
		__atomic_store_n(&rq->rng, sink, __ATOMIC_RELEASE);
		sinks[nsinks++] = sink;
	}
	fprintf(stderr, "ring_feeder: %s: %u TX queue(s) taken over\n", dev, info.nb_tx_queues);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The primary's port named dev. */
static uint16_t port_of(const char *dev)
{
	uint16_t port;
	if (rte_eth_dev_get_port_by_name(dev, &port) != 0)
		rte_exit(EXIT_FAILURE, "no port %s in the primary\n", dev);
	return port;
}

/* Waits until the primary has started port (dev): its link is in the
 * ethdev data the processes share, and net_ring's start sets it up. */
static void wait_started(uint16_t port, const char *dev, double deadline)
{
	for (;;) {
		struct rte_eth_link link;
		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP)
			return;
		if (stopping || now_s() > deadline)
			rte_exit(EXIT_FAILURE, "the primary did not start %s\n", dev);
		usleep(10000);
	}
}

/* A burst of mbufs into m: what the sinks hold first, the rest from the
 * pool. False, with nothing taken, when the pool cannot give the rest. */
static inline bool take_mbufs(struct rte_mbuf **m, unsigned int burst, struct rte_mempool *pool)
{
	unsigned int got = 0;
	for (unsigned int i = 0; i < nsinks && got < burst; i++)
		got += rte_ring_sc_dequeue_burst(sinks[i], (void **)m + got, burst - got, NULL);
	recycled += got;
	if (got < burst && unlikely(rte_mempool_get_bulk(pool, (void **)m + got, burst - got) != 0)) {
		if (got)
			rte_pktmbuf_free_bulk(m, got);
		recycled -= got;
		return false;
	}
	return true;
}

/* One burst into q's ring, when it has room for the whole burst: the
 * packets enqueued. */
static inline unsigned int feed(struct queue *q, struct rte_mempool *pool, unsigned int burst,
				uint16_t port)
{
	struct rte_mbuf *m[MAX_BURST];
	unsigned int free = rte_ring_free_count(q->ring);
	if (free < burst)
		return 0;
	if (free + burst >= rte_ring_get_capacity(q->ring))
		q->low++;
	if (unlikely(!take_mbufs(m, burst, pool))) {
		q->nomem++;
		return 0;
	}
	for (unsigned int i = 0; i < burst; i++) {
		struct rte_mbuf *b = m[i];
		uint32_t f = q->next;
		q->next = (f + 1 == q->count) ? 0 : f + 1;
		uint16_t len = q->lens[f];
		/* What a PMD's RX writes: the rearm fields, flags, type and
		 * lengths. An mbuf in a pool is a raw one (rte_pktmbuf_free
		 * leaves next NULL, and a recycled one was transmitted as one
		 * segment): next is read, and only written when it is not, so
		 * the second cache line stays clean on both cores. */
		b->data_off = RTE_PKTMBUF_HEADROOM;
		rte_mbuf_refcnt_set(b, 1);
		b->nb_segs = 1;
		b->port = port;
		b->ol_flags = 0;
		b->packet_type = 0;
		b->pkt_len = len;
		b->data_len = len;
		b->vlan_tci = 0;
		b->vlan_tci_outer = 0;
		b->hash.rss = 0;
		if (unlikely(b->next != NULL))
			b->next = NULL;
		rte_memcpy(rte_pktmbuf_mtod(b, void *), q->frames + (size_t)f * q->stride, len);
	}
	unsigned int sent = rte_ring_enqueue_burst(q->ring, (void **)m, burst, NULL);
	if (unlikely(sent < burst))
		rte_pktmbuf_free_bulk(m + sent, burst - sent);
	q->enqueued += sent;
	return sent;
}

int main(int argc, char **argv)
{
	int eal = rte_eal_init(argc, argv);
	if (eal < 0)
		rte_exit(EXIT_FAILURE, "EAL: %s\n", rte_strerror(rte_errno));
	argc -= eal;
	argv += eal;
	if (rte_eal_process_type() != RTE_PROC_SECONDARY)
		rte_exit(EXIT_FAILURE, "run it with --proc-type=secondary and the primary's --file-prefix\n");

	const char *pool_name = NULL, *dev = "net_ring0", *sink_devs[MAX_SINKS];
	unsigned int nsink_devs = 0;
	unsigned int burst = 32, wait_s = 10, idle_sleep_us = 0;
	uint16_t port = 0;
	bool port_set = false;
	struct queue queues[MAX_QUEUES];
	unsigned int nq = 0;
	memset(queues, 0, sizeof(queues));
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pool") == 0 && i + 1 < argc)
			pool_name = argv[++i];
		else if (strcmp(argv[i], "--dev") == 0 && i + 1 < argc)
			dev = argv[++i];
		else if (strcmp(argv[i], "--burst") == 0 && i + 1 < argc)
			burst = (unsigned int)strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			port = (uint16_t)strtoul(argv[++i], NULL, 10);
			port_set = true;
		}
		else if (strcmp(argv[i], "--idle-sleep") == 0 && i + 1 < argc)
			idle_sleep_us = (unsigned int)strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--sink") == 0 && i + 1 < argc) {
			if (nsink_devs == MAX_SINKS)
				rte_exit(EXIT_FAILURE, "too many --sink\n");
			sink_devs[nsink_devs++] = argv[++i];
		}
		else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc)
			wait_s = (unsigned int)strtoul(argv[++i], NULL, 10);
		else if (argv[i][0] == '-')
			rte_exit(EXIT_FAILURE, "unknown option %s\n", argv[i]);
		else if (nq == MAX_QUEUES)
			rte_exit(EXIT_FAILURE, "at most %d pcap files (one per queue)\n", MAX_QUEUES);
		else
			queues[nq++].pcap = argv[i];
	}
	if (nq == 0)
		rte_exit(EXIT_FAILURE, "no pcap file\n");
	if (burst == 0 || burst > MAX_BURST)
		rte_exit(EXIT_FAILURE, "--burst must be 1..%d\n", MAX_BURST);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	/* The rings appear when the primary's EAL probes the device. */
	double deadline = now_s() + wait_s;
	for (unsigned int q = 0; q < nq; q++) {
		char name[RTE_RING_NAMESIZE];
		snprintf(name, sizeof(name), "ETH_RXTX%u_%s", q, dev);
		while ((queues[q].ring = rte_ring_lookup(name)) == NULL) {
			if (stopping || now_s() > deadline)
				rte_exit(EXIT_FAILURE, "no ring %s in the primary\n", name);
			usleep(10000);
		}
	}
	uint16_t port_id = port_of(dev);
	fprintf(stderr, "ring_feeder: attached\n");
	/* The pool is complete (created, populated, every mbuf initialised)
	 * once the primary has started the port it receives on: it is
	 * visible by name, half built, well before. */
	wait_started(port_id, dev, deadline);
	if (!port_set)
		port = port_id;
	for (unsigned int i = 0; i < nsink_devs; i++) {
		uint16_t sink_port = port_of(sink_devs[i]);
		wait_started(sink_port, sink_devs[i], deadline);
		take_over_tx(sink_devs[i], sink_port);
	}
	if (nsink_devs) {
		/* dev is a net_ring device too: the same burst functions. */
		printf("ring-burst-functions: rx=0x%016lx tx=0x%016lx\n",
		       (unsigned long)offset_in_object((void *)rte_eth_fp_ops[port_id].rx_pkt_burst),
		       (unsigned long)offset_in_object((void *)rte_eth_fp_ops[port_id].tx_pkt_burst));
		fflush(stdout);
	}

	struct rte_mempool *pool;
	if (pool_name != NULL) {
		pool = rte_mempool_lookup(pool_name);
		if (pool == NULL)
			rte_exit(EXIT_FAILURE, "no mempool %s in the primary\n", pool_name);
	} else {
		struct pool_search s = {NULL, 0};
		rte_mempool_walk(find_pktmbuf_pool, &s);
		if (s.n != 1)
			rte_exit(EXIT_FAILURE, "%u pktmbuf pools in the primary: name one with --pool\n",
				 s.n);
		pool = s.found;
	}
	uint32_t room = rte_pktmbuf_data_room_size(pool);
	uint32_t max_len = room > RTE_PKTMBUF_HEADROOM ? room - RTE_PKTMBUF_HEADROOM : 0;

	for (unsigned int q = 0; q < nq; q++)
		load_pcap(&queues[q], max_len);
	fprintf(stderr, "ring_feeder: lcore %u, pool %s, %u queue(s), burst %u:", rte_lcore_id(),
		pool->name, nq, burst);
	for (unsigned int q = 0; q < nq; q++)
		fprintf(stderr, " %s (%u frames)", queues[q].ring->name, queues[q].count);
	fprintf(stderr, "\n");

	uint64_t total = 0, last_total = 0, last_recycled = 0;
	double last = now_s();
	unsigned int spins = 0;
	uint64_t hz = rte_get_tsc_hz(), prev = rte_rdtsc(), gap = 0;
	while (!stopping) {
		unsigned int fed = 0;
		uint64_t tsc = rte_rdtsc();
		if (tsc - prev > gap)
			gap = tsc - prev;
		prev = tsc;
		for (unsigned int q = 0; q < nq; q++)
			fed += feed(&queues[q], pool, burst, port);
		total += fed;
		/* Every ring full: the consumer is the slower. Spin (a full
		 * ring lasts 31 bursts of the consumer: ~100 us at 10 Mpps),
		 * or with --idle-sleep sleep (a slow consumer, such as one
		 * under valgrind, draining the ring in milliseconds). */
		if (fed == 0) {
			if (idle_sleep_us)
				usleep(idle_sleep_us);
			else
				rte_pause();
		}
		if (++spins < 4096)
			continue;
		spins = 0;
		double t = now_s();
		if (t - last >= 1.0) {
			uint64_t low = 0, nomem = 0;
			for (unsigned int q = 0; q < nq; q++) {
				low += queues[q].low;
				nomem += queues[q].nomem;
			}
			printf("feeder-pps: %.0f low: %lu nomem: %lu gap-us: %.0f recycled: %.2f\n",
			       (double)(total - last_total) / (t - last), (unsigned long)low,
			       (unsigned long)nomem, (double)gap * 1e6 / (double)hz,
			       total > last_total ? (double)(recycled - last_recycled) /
						    (double)(total - last_total)
						  : 0.0);
			gap = 0;
			last_recycled = recycled;
			fflush(stdout);
			last_total = total;
			last = t;
			if (!rte_eal_primary_proc_alive(NULL))
				break;
		}
	}
	printf("feeder-total: %lu\n", (unsigned long)total);
	fflush(stdout);
	rte_eal_cleanup();
	return 0;
}
