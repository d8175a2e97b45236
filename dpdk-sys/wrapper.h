/* Everything sluice uses from DPDK. bindgen reads this file; the static
 * inline functions it declares get out-of-line wrappers (wrap_static_fns)
 * compiled by build.rs, so Rust can call rte_eth_rx_burst & co. */
#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_malloc.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_bus_vdev.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_jhash.h>
#include <rte_ip_frag.h>
#include <rte_ring.h>
#include <rte_version.h>
#include <rte_pdump.h>

/* rte_errno is a per-lcore (thread-local) variable behind a macro. */
int sluice_rte_errno(void);

/* DPDK's log into one callback: the message's RTE_LOG_* level and text
 * (not NUL-terminated), once per message, instead of EAL's default of
 * stdout plus syslog. */
typedef void (*sluice_log_sink_t)(int level, const char *buf, size_t len);
int sluice_log_to(sluice_log_sink_t sink);
