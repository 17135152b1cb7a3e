/* The uploader (optional "upload" block): each snapshot this mount makes
 * is put into an S3 bucket as the mount shows it,
 *   <prefix><cluster>/<service>/<time>/<file>
 * only if no object is there (HEAD, then PUT: never an overwrite), and
 * then <time>/.complete, last: what tells an s3 cluster's mount that the
 * round is complete. merged/ and latest/ are never uploaded. */
#ifndef PFS_UPLOAD_H
#define PFS_UPLOAD_H

#include <jansson.h>

struct pfs_parser;
struct pfs_settings;
struct pfs_config;
struct pfs_service;

int pfs_upload_parse(struct pfs_parser *p, json_t *v, const struct pfs_settings *s,
		     struct pfs_config *cfg);
void pfs_upload_free(struct pfs_config *cfg);

int pfs_upload_start(struct pfs_config *cfg);
/* Unmounting: what is queued is still uploaded, for at most 30 s. */
void pfs_upload_stop(void);
/* A round of s has settled (no fetch in flight, a file in it): queue it. */
void pfs_upload_round(struct pfs_service *s, const char *round);
/* For .status.json (NULL without an upload block). */
json_t *pfs_upload_status(void);

#endif
