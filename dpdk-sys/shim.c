#include <rte_errno.h>

int sluice_rte_errno(void) { return rte_errno; }
