/* fopencookie needs _GNU_SOURCE, defined by build.rs. */
#include <stdio.h>
#include <sys/types.h>
#include <rte_log.h>
#include <rte_errno.h>

typedef void (*sluice_log_sink_t)(int level, const char *buf, size_t len);

int sluice_rte_errno(void) { return rte_errno; }

static sluice_log_sink_t sluice_sink;

static ssize_t sluice_log_write(void *cookie, const char *buf, size_t len)
{
	(void)cookie;
	if (sluice_sink != NULL)
		sluice_sink(rte_log_cur_msg_loglevel(), buf, len);
	return (ssize_t)len;
}

int sluice_log_to(sluice_log_sink_t sink)
{
	static cookie_io_functions_t io = { .write = sluice_log_write };
	FILE *f;

	sluice_sink = sink;
	f = fopencookie(NULL, "w", io);
	if (f == NULL)
		return -1;
	/* One write per message: rte_vlog flushes after each. */
	setvbuf(f, NULL, _IOFBF, 4096);
	return rte_openlog_stream(f);
}
