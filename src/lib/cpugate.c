/* Cpu gate: a hash of busy keys, each with its FIFO of waiting jobs. */
#include "cpugate.h"

#include "names.h"
#include "xalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NBUCKETS 1024

struct waiter {
	void *job;
	double seconds;
	struct waiter *next;
};

struct key {
	struct key *next;        /* bucket chain */
	struct waiter *q, *tail; /* queued behind the holder */
	double due;              /* CLOCK_MONOTONIC s: the last of them done by then */
	char name[];
};

static struct key *g_buckets[NBUCKETS];

static double now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct key **slot_of(const char *name)
{
	struct key **k = &g_buckets[pfs_fnv1a(PFS_FNV_INIT, name) % NBUCKETS];

	while (*k && strcmp((*k)->name, name) != 0)
		k = &(*k)->next;
	return k;
}

bool pfs_cpugate_enter(const char *key, void *job, double seconds)
{
	struct key **kp = slot_of(key), *k = *kp;
	double now = now_mono();

	if (!k) {
		size_t n = strlen(key) + 1;
		k = pfs_xcalloc(1, sizeof *k + n);
		memcpy(k->name, key, n);
		k->due = now + seconds;
		*kp = k;
		return true;
	}
	struct waiter *w = pfs_xcalloc(1, sizeof *w);
	w->job = job;
	w->seconds = seconds;
	if (k->tail)
		k->tail->next = w;
	else
		k->q = w;
	k->tail = w;
	k->due = (k->due > now ? k->due : now) + seconds;
	return false;
}

void *pfs_cpugate_leave(const char *key)
{
	struct key **kp = slot_of(key), *k = *kp;
	struct waiter *w;
	void *job;

	if (!k)
		return NULL;
	if (!(w = k->q)) {
		*kp = k->next;
		free(k);
		return NULL;
	}
	if (!(k->q = w->next))
		k->tail = NULL;
	/* the new holder starts now: its chain ends no later than before,
	 * unless the holder before it finished late */
	double end = now_mono() + w->seconds;
	for (struct waiter *x = k->q; x; x = x->next)
		end += x->seconds;
	if (end > k->due)
		k->due = end;
	job = w->job;
	free(w);
	return job;
}

double pfs_cpugate_backlog(const char *key)
{
	struct key *k = *slot_of(key);
	double left = k ? k->due - now_mono() : 0;

	return left > 0 ? left : 0;
}
