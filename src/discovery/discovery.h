/* Fleet discovery for kind "pprof": a cluster's services and targets come
 * from where the fleet is listed already (Prometheus file_sd and http_sd,
 * DNS SRV/A records, Kubernetes pods) instead of the config. Each
 * mechanism runs on a thread of its own and yields Prometheus-style label
 * sets; the cluster's "discover" block maps them to <service> and
 * <instance> (files heap.<instance>.pb.gz) and filters them. Listings
 * never wait for a refresh: they show the last good result. */
#ifndef PFS_DISCOVERY_H
#define PFS_DISCOVERY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct pfs_parser;
struct pfs_settings;
struct pfs_cluster;
struct pfs_config;

/* The cluster's "discover" block (v), with the cluster's settings s for
 * the discovered targets (auth, headers, timeout, profiles). */
int pfs_discovery_parse(struct pfs_parser *p, json_t *v, const char *where,
			const struct pfs_settings *s, struct pfs_cluster *c);
void pfs_discovery_free(struct pfs_cluster *c);

/* Start every cluster's mechanisms, then wait (at most `wait` seconds)
 * for each one's first answer, so a fresh mount is not empty. */
int pfs_discovery_start(struct pfs_config *cfg, double wait);
void pfs_discovery_stop(struct pfs_config *cfg);

/* Called (no lock held) when discovery added services to cluster c. */
typedef void (*pfs_discovery_added_fn)(struct pfs_cluster *c);
void pfs_discovery_set_hook(pfs_discovery_added_fn fn);

/* The cluster's discovery for .status.json: each mechanism's state, the
 * targets discovered and those dropped, with the reason (NULL: none). */
json_t *pfs_discovery_status(struct pfs_cluster *c);

#endif
