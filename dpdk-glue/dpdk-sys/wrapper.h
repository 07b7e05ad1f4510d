/* wrapper.h: everything bindgen sees (see build.rs for the allowlist). */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_dev.h>
#include <rte_alarm.h>
#include <rte_bus.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_memory.h>
#include "shim.h"
