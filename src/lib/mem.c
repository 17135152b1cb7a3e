/* The memory budget, an atomic counter. */
#include "mem.h"

#include <stdint.h>
#include <stdlib.h>

static size_t g_max = (size_t)1 << 30, g_used;

void pfs_mem_init(size_t max) { g_max = max; }

bool pfs_mem_take(size_t n)
{
	size_t cur = __atomic_load_n(&g_used, __ATOMIC_RELAXED);

	do {
		if (n > g_max || cur > g_max - n)
			return false;
	} while (!__atomic_compare_exchange_n(&g_used, &cur, cur + n, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return true;
}

void pfs_mem_give(size_t n) { __atomic_fetch_sub(&g_used, n, __ATOMIC_RELAXED); }

size_t pfs_mem_used(void) { return __atomic_load_n(&g_used, __ATOMIC_RELAXED); }

size_t pfs_mem_max(void) { return g_max; }

/* Each block carries its size in front (16 bytes keep malloc's alignment). */
#define HDR 16

static void *pb_alloc(void *data, size_t size)
{
	uint8_t *p;

	(void)data;
	if (!pfs_mem_take(size + HDR))
		return NULL;
	if (!(p = malloc(size + HDR))) { /* budgeted: checked (xalloc.h) */
		pfs_mem_give(size + HDR);
		return NULL;
	}
	*(size_t *)p = size;
	return p + HDR;
}

static void pb_free(void *data, void *ptr)
{
	uint8_t *p = ptr;

	(void)data;
	if (!p)
		return;
	p -= HDR;
	pfs_mem_give(*(size_t *)p + HDR);
	free(p);
}

ProtobufCAllocator pfs_mem_pb = {pb_alloc, pb_free, NULL};
