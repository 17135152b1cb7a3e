/* Worker pool: a FIFO queue and a fixed number of threads. */
#include "work.h"
#include "xalloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct item {
	void (*fn)(void *arg);
	void *arg;
	struct item *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static struct item *g_head, *g_tail;
static pthread_t *g_threads;
static int g_n;
static bool g_stop;

static void *worker(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g_lock);
	for (;;) {
		while (!g_head && !g_stop)
			pthread_cond_wait(&g_cond, &g_lock);
		if (!g_head)
			break; /* stopping, and nothing left */
		struct item *it = g_head;
		if (!(g_head = it->next))
			g_tail = NULL;
		pthread_mutex_unlock(&g_lock);
		it->fn(it->arg);
		free(it);
		pthread_mutex_lock(&g_lock);
	}
	pthread_mutex_unlock(&g_lock);
	return NULL;
}

int pfs_work_start(int threads)
{
	g_threads = pfs_xcalloc((size_t)threads, sizeof *g_threads);
	for (g_n = 0; g_n < threads; g_n++)
		if (pthread_create(&g_threads[g_n], NULL, worker, NULL))
			return -1;
	return 0;
}

void pfs_work_stop(void)
{
	pthread_mutex_lock(&g_lock);
	g_stop = true;
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);
	for (int i = 0; i < g_n; i++)
		pthread_join(g_threads[i], NULL);
	free(g_threads);
	g_threads = NULL;
	g_n = 0;
}

void pfs_work_submit(void (*fn)(void *arg), void *arg)
{
	struct item *it = pfs_xmalloc(sizeof *it);

	it->fn = fn;
	it->arg = arg;
	it->next = NULL;
	pthread_mutex_lock(&g_lock);
	if (g_tail)
		g_tail->next = it;
	else
		g_head = it;
	g_tail = it;
	pthread_cond_signal(&g_cond);
	pthread_mutex_unlock(&g_lock);
}
