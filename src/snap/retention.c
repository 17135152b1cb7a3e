/* Retention: rounds older than the retention leave the disk and the index
 * (prune, per service), and old rounds of services this mount does not
 * know leave the disk (sweep); the sweeper thread runs both now and then. */
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Oldest round time kept: retention; windows and listed rounds also while
 * in range. */
static time_t keep_from(const struct pfs_service *s, time_t now)
{
	double keep = snap.cfg->retention;

	if (snap_pol(s)->keeps_range && s->cluster->api.range + s->cluster->api.window > keep)
		keep = s->cluster->api.range + s->cluster->api.window;
	return now - (time_t)keep;
}

void snap_free_round(struct round *r)
{
	free(r->slots);
	free(r);
}

/* Drop rounds older than the retention, on disk and in memory; rounds in
 * use (latest, fetching, waited on) stay until a later prune. */
void snap_prune(struct pfs_service *s, time_t now)
{
	struct round **pp = &s->state->rounds;
	time_t from = keep_from(s, now);

	while (*pp) {
		struct round *r = *pp;
		if (r->t >= from || r->pins || snap_round_has(s, r, SLOT_FETCHING) ||
		    (snap_pol(s)->holds && snap_pol(s)->holds(s, r, now))) {
			pp = &r->next;
			continue;
		}
		if (r == s->state->current)
			s->state->current = NULL; /* stale: the next access takes a new one */
		int rc = pfs_cache_remove_round(s->cluster->name, s->name, r->name);
		if (rc && rc != -ENOENT)
			pfs_warn("retention: cannot remove %s/%s/%s: %s", s->cluster->name, s->name,
				 r->name, strerror(-rc));
		else
			pfs_debug("retention: removed %s/%s/%s", s->cluster->name, s->name, r->name);
		if (snap.on_removed) /* the kernel may cache it: it only queues */
			snap.on_removed(s, r->name);
		*pp = r->next;
		snap_free_round(r);
	}
}

/* Rounds on disk of services this mount does not know (not in the config,
 * not discovered yet) go by retention too. */
static void sweep_round(const char *cluster, const char *service, const char *round, void *arg)
{
	time_t now = *(time_t *)arg, t;
	struct pfs_cluster *c = pfs_registry_cluster(snap.cfg, cluster);

	if (pfs_name_parse_time(round, &t) || t >= now - (time_t)snap.cfg->retention)
		return;
	if (c) {
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < c->n_services; i++)
			if (strcmp(c->services[i]->name, service) == 0) {
				pthread_mutex_unlock(&c->lock); /* known: prune() decides */
				return;
			}
	}
	if (pfs_cache_remove_round(cluster, service, round) == 0)
		pfs_debug("retention: removed %s/%s/%s", cluster, service, round);
	if (c)
		pthread_mutex_unlock(&c->lock);
}

void pfs_snap_sweep(void)
{
	time_t now = time(NULL);

	for (size_t i = 0; i < snap.cfg->n_clusters; i++) {
		struct pfs_service **svcs;
		size_t n = pfs_registry_services(&snap.cfg->clusters[i], &svcs);
		pthread_mutex_lock(&snap.lock);
		for (size_t j = 0; j < n; j++)
			snap_prune(svcs[j], now);
		pthread_mutex_unlock(&snap.lock);
		free(svcs);
	}
	pfs_cache_each_round(sweep_round, &now);
}

static pthread_t g_sweeper;
static pthread_cond_t g_sweep_cond;
static bool g_sweep_stop;

static void *sweeper_main(void *unused)
{
	/* Often enough that nothing outlives retention by more than half of
	 * it; at most every 5 minutes, at least every second. */
	double every = snap.cfg->retention / 2 > 300 ? 300 : snap.cfg->retention / 2 < 1 ? 1 : snap.cfg->retention / 2;
	struct timespec dl;

	(void)unused;
	pthread_mutex_lock(&snap.lock);
	while (!g_sweep_stop) {
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += (time_t)every;
		if (pthread_cond_timedwait(&g_sweep_cond, &snap.lock, &dl) != ETIMEDOUT || g_sweep_stop)
			continue;
		pthread_mutex_unlock(&snap.lock);
		pfs_snap_sweep();
		pthread_mutex_lock(&snap.lock);
	}
	pthread_mutex_unlock(&snap.lock);
	return NULL;
}

int pfs_snap_sweeper_start(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g_sweep_cond, &ca);
	return pthread_create(&g_sweeper, NULL, sweeper_main, NULL) ? -1 : 0;
}

void pfs_snap_sweeper_stop(void)
{
	pthread_mutex_lock(&snap.lock);
	g_sweep_stop = true;
	pthread_cond_signal(&g_sweep_cond);
	pthread_mutex_unlock(&snap.lock);
	pthread_join(g_sweeper, NULL);
}
