/* Fetcher: one thread drives every HTTP transfer through a libcurl multi
 * handle, so any number of fetches run at once and none blocks another. */
#ifndef PFS_FETCH_H
#define PFS_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pfs_target;

struct pfs_fetch {
	/* Request, filled in by the submitter. */
	char *url;                       /* full URL, owned by the submitter */
	const struct pfs_target *target; /* headers, auth, for this request */
	long timeout_ms;                 /* whole transfer, connect included */
	size_t max_bytes;                /* larger bodies fail the fetch */
	const uint8_t *post;             /* POST this body (NULL: GET) */
	size_t post_len;
	const char *content_type;        /* of the POST body */
	const char *method;              /* "PUT" (of post), "HEAD"; NULL: GET or POST */
	/* If set, called with each response header line. */
	void (*on_header)(const char *line, size_t len, void *arg);
	void *header_arg;
	/* If set, asked every second or so: true gives up (unmounting). */
	bool (*cancel)(void *arg);
	void *cancel_arg;
	/* Called once on the fetcher thread when the fetch has finished, with
	 * the result below filled in. It owns f from then on. */
	void (*done)(struct pfs_fetch *f);
	void *arg;

	/* Result. ok means HTTP 200 with a complete body. */
	bool ok;
	long http_status;                /* 0 when no response came */
	char error[256];                 /* why, when !ok: one line, no secrets */
	uint8_t *body;
	size_t len;

	/* Private to the fetcher. */
	size_t cap;      /* charged to the memory budget */
	bool too_big, over_budget;
	char curl_err[256];
	void *easy;
	struct curl_slist *slist;
	struct pfs_fetch *next;
	struct pfs_fetch *active_next, *active_prev;
};

/* At most max_connections transfers at once (the others queue, in order,
 * their timeout not yet running); with max_host_connections > 0, at most
 * that many connections to one host:port (curl holds the rest back, and
 * their time waiting counts in their timeout). */
int pfs_fetcher_start(size_t max_connections, size_t max_host_connections);
/* Fails whatever is still in flight (done() is called) and stops; a
 * fetch submitted after that fails at once. pfs_fetch_run() still works
 * (until curl_global_cleanup(), main's). */
void pfs_fetcher_stop(void);
void pfs_fetch_submit(struct pfs_fetch *f);
/* Run f here, blocking (done is not called): 0 if f->ok, else -1 with
 * f->error set. Release f afterwards. */
int pfs_fetch_run(struct pfs_fetch *f);
/* The request headers for a target: User-Agent, Content-Type if given,
 * then the target's own (auth included). Free with curl_slist_free_all. */
struct curl_slist *pfs_fetch_headers(const struct pfs_target *t, const char *content_type);
/* "HTTP <status>" and the first line of a short text body (an API's error
 * message), into out. */
void pfs_http_error(char *out, size_t outlen, long status, const uint8_t *body, size_t len);
/* Free body and private state (not url, not f). */
void pfs_fetch_release(struct pfs_fetch *f);

#endif
