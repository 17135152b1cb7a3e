/* Source kind "nats": NATS servers' PROFILEZ through the system account.
 *   services  every server answering $SYS.REQ.SERVER.PING (its STATSZ:
 *             {"server":{"name","id",...},...}), shown by name
 *   bytes     request $SYS.REQ.SERVER.<id>.PROFILEZ {"name","debug":0} (cpu:
 *             "duration" in nanoseconds); the reply's data.profile is the
 *             base64 of a gzip'd profile.proto, data.error a profile error,
 *             error {code,description} a request error.
 * Each fetch runs on its own short-lived thread (libnats requests block). */
#include "source.h"

#include "lib/confparse.h"

#include "lib/log.h"
#include "lib/xalloc.h"
#include "lib/secrets.h"

#include <jansson.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the longest cpu profile nats-server's PROFILEZ takes, in seconds */
#define PFS_NATS_CPU_MAX 15

/* The kind's own settings (c->kind): a system account's login. */
struct nats_conf {
	char *user, *password; /* a system-account user */
	char *token;           /* or its token */
};

static struct nats_conf *conf(const struct pfs_cluster *c) { return c->kind; }

static void free_kind(void *kind)
{
	struct nats_conf *k = kind;

	free(k->user);
	pfs_secret_free(k->password);
	pfs_secret_free(k->token);
	free(k);
}

static pthread_mutex_t g_conn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_idle = PTHREAD_COND_INITIALIZER;
static int g_active; /* fetch threads running (g_conn_lock) */

struct conn {
	struct pfs_cluster *c;
	natsConnection *nc;
	struct conn *next;
};
static struct conn *g_conns;

/* The cluster's connection, made on first use. */
static natsConnection *connection(struct pfs_cluster *c, char *err, size_t errlen)
{
	const struct pfs_api *a = &c->api;
	const struct nats_conf *login = conf(c);
	natsConnection *nc = NULL;
	natsOptions *o = NULL;
	natsStatus st;

	pthread_mutex_lock(&g_conn_lock);
	for (struct conn *k = g_conns; k; k = k->next)
		if (k->c == c && natsConnection_Status(k->nc) != NATS_CONN_STATUS_CLOSED) {
			nc = k->nc;
			goto out;
		}
	if ((st = natsOptions_Create(&o)) == NATS_OK)
		st = natsOptions_SetURL(o, a->target.url);
	if (st == NATS_OK)
		st = natsOptions_SetTimeout(o, (int64_t)(a->target.timeout * 1000));
	if (st == NATS_OK && login->user)
		st = natsOptions_SetUserInfo(o, login->user, login->password);
	if (st == NATS_OK && login->token)
		st = natsOptions_SetToken(o, login->token);
	if (st == NATS_OK)
		st = natsOptions_SetMaxReconnect(o, -1);
	if (st == NATS_OK)
		st = natsConnection_Connect(&nc, o);
	natsOptions_Destroy(o);
	if (st != NATS_OK) {
		const char *last = nats_GetLastError(NULL);
		snprintf(err, errlen, "connect: %s%s%s", natsStatus_GetText(st), last ? ": " : "",
			 last ? last : "");
		nc = NULL;
		goto out;
	}
	struct conn *k = pfs_xcalloc(1, sizeof *k);
	k->c = c;
	k->nc = nc;
	k->next = g_conns;
	g_conns = k;
out:
	pthread_mutex_unlock(&g_conn_lock);
	return nc;
}

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	natsConnection *nc = connection(c, err, errlen);
	natsSubscription *sub = NULL;
	natsInbox *inbox = NULL;
	natsMsg *msg = NULL;
	struct pfs_file files[PFS_NPROFILES];
	size_t n_files = 0, found = 0;
	int64_t left = (int64_t)(c->api.target.timeout * 1000), wait;
	natsStatus st;

	if (!nc)
		return -1;
	for (int p = 0; p < PFS_NPROFILES; p++)
		if (c->profiles & (1u << p)) {
			struct pfs_file *f = &files[n_files++];
			memset(f, 0, sizeof *f);
			f->profile = p;
			snprintf(f->name, sizeof f->name, "%s.pb.gz", pfs_profile_names[p]);
			memcpy(f->key, f->name, sizeof f->key);
			snprintf(f->merge_key, sizeof f->merge_key, "%s", pfs_profile_names[p]);
		}
	st = natsInbox_Create(&inbox);
	if (st == NATS_OK)
		st = natsConnection_SubscribeSync(&sub, nc, inbox);
	if (st == NATS_OK)
		st = natsConnection_PublishRequest(nc, "$SYS.REQ.SERVER.PING", inbox, "", 0);
	/* Every server answers: collect until 500 ms pass without a reply. */
	for (wait = left; st == NATS_OK && left > 0; wait = left < 500 ? left : 500) {
		int64_t t0 = nats_Now();
		if (natsSubscription_NextMsg(&msg, sub, wait) != NATS_OK)
			break;
		left -= nats_Now() - t0;
		json_t *root = json_loadb(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), 0, NULL);
		json_t *server = json_object_get(root, "server");
		const char *id = json_string_value(json_object_get(server, "id"));
		const char *name = json_string_value(json_object_get(server, "name"));
		/* an id is one subject token: no spaces, dots or wildcards */
		if (id && *id && strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					    "0123456789_-") == strlen(id)) {
			pfs_registry_add_service(c, id, name && *name ? name : id, files, n_files);
			found++;
		}
		json_decref(root);
		natsMsg_Destroy(msg);
	}
	natsSubscription_Destroy(sub);
	natsInbox_Destroy(inbox);
	if (st != NATS_OK) {
		snprintf(err, errlen, "$SYS.REQ.SERVER.PING: %s", natsStatus_GetText(st));
		return -1;
	}
	if (!found) {
		snprintf(err, errlen, "$SYS.REQ.SERVER.PING: no server answered (is the user in the "
				      "system account?)");
		return -1;
	}
	return 0;
}

/* Turn a PROFILEZ reply into gzip'd bytes; -1 with a reason otherwise. */
static int decode_reply(const char *data, size_t len, uint8_t **gz, size_t *gzlen, char *err,
			size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb(data, len, 0, &jerr), *e, *d, *prof;
	int rc = -1;

	if (!root) {
		snprintf(err, errlen, "bad JSON reply: %s", jerr.text);
		return -1;
	}
	e = json_object_get(root, "error");
	d = json_object_get(root, "data");
	prof = json_object_get(d, "profile");
	if (json_is_object(e))
		snprintf(err, errlen, "error %lld: %s",
			 (long long)json_integer_value(json_object_get(e, "code")),
			 json_string_value(json_object_get(e, "description")) ?: "");
	else if (json_string_length(json_object_get(d, "error"))) {
		const char *msg = json_string_value(json_object_get(d, "error"));
		/* before 2.10.19, "cpu" is looked up as a runtime profile */
		bool old = strcmp(msg, "Profile \"cpu\" not found") == 0;
		snprintf(err, errlen, "profilez: %s%s", msg,
			 old ? " (cpu profiles need nats-server 2.10.19 or later)" : "");
	} else if (!json_is_string(prof))
		snprintf(err, errlen, "reply has no data.profile");
	else if (pfs_base64_decode(json_string_value(prof), json_string_length(prof), gz, gzlen))
		snprintf(err, errlen, "data.profile is not base64");
	else
		rc = 0;
	json_decref(root);
	return rc;
}

static int decode(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz, size_t *gzlen,
		  char *err, size_t errlen)
{
	(void)j;
	return decode_reply((const char *)body, len, gz, gzlen, err, errlen);
}

static void *fetch_thread(void *arg)
{
	struct pfs_job *j = arg;
	struct pfs_cluster *c = j->svc->cluster;
	char subj[512], req[256], err[512];
	natsConnection *nc = connection(c, err, sizeof err);
	natsMsg *msg = NULL;
	uint8_t *gz = NULL;
	size_t gzlen = 0;
	natsStatus st;

	if (!nc) {
		pfs_job_finish(j, -1, NULL, 0, err);
		return NULL;
	}
	snprintf(subj, sizeof subj, "$SYS.REQ.SERVER.%s.PROFILEZ", j->svc->upstream);
	if (j->file->profile == PFS_CPU)
		snprintf(req, sizeof req, "{\"name\":\"cpu\",\"debug\":0,\"duration\":%lld}",
			 (long long)(j->svc->cpu_seconds * 1e9));
	else
		snprintf(req, sizeof req, "{\"name\":\"%s\",\"debug\":0}",
			 pfs_profile_names[j->file->profile]);
	st = natsConnection_RequestString(&msg, nc, subj, req, j->timeout_ms);
	if (st != NATS_OK) {
		/* the server answered PING but nothing listens on PROFILEZ */
		snprintf(err, sizeof err, "nats: %s%s", natsStatus_GetText(st),
			 st == NATS_NO_RESPONDERS ? " (PROFILEZ needs nats-server 2.10.0 or later)"
						  : "");
		pfs_job_finish(j, -1, NULL, 0, err);
		return NULL;
	}
	if (decode_reply(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), &gz, &gzlen, err,
			 sizeof err)) {
		natsMsg_Destroy(msg);
		pfs_job_finish(j, -1, NULL, 0, err);
		return NULL;
	}
	natsMsg_Destroy(msg);
	pfs_job_finish(j, 0, gz, gzlen, NULL);
	return NULL;
}

static void *fetch_main(void *arg)
{
	fetch_thread(arg);
	pthread_mutex_lock(&g_conn_lock);
	if (--g_active == 0)
		pthread_cond_broadcast(&g_idle);
	pthread_mutex_unlock(&g_conn_lock);
	return NULL;
}

static void start(struct pfs_job *j)
{
	pthread_t t;
	pthread_attr_t attr;

	pfs_job_set(&j->what, "%s $SYS.REQ.SERVER.%s.PROFILEZ",
		 j->svc->cluster->api.target.log_url, j->svc->upstream);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&g_conn_lock);
	g_active++;
	pthread_mutex_unlock(&g_conn_lock);
	if (pthread_create(&t, &attr, fetch_main, j) != 0) {
		pthread_mutex_lock(&g_conn_lock);
		g_active--;
		pthread_mutex_unlock(&g_conn_lock);
		pfs_err("nats: cannot start a fetch thread"); /* the slot times out */
	}
	pthread_attr_destroy(&attr);
}

static void cleanup(void)
{
	pthread_mutex_lock(&g_conn_lock);
	bool any = g_conns != NULL;
	/* Closing makes requests in flight return at once; then their
	 * threads finish their jobs. */
	for (struct conn *k = g_conns; k; k = k->next)
		natsConnection_Close(k->nc);
	while (g_active > 0)
		pthread_cond_wait(&g_idle, &g_conn_lock);
	while (g_conns) {
		struct conn *k = g_conns;
		g_conns = k->next;
		natsConnection_Destroy(k->nc);
		free(k);
	}
	pthread_mutex_unlock(&g_conn_lock);
	if (any)
		nats_Close();
}

/* One cpu profile per server: its id names it across clusters too. */
static bool cpu_key(const struct pfs_service *s, const struct pfs_file *f, char *out,
		    size_t outlen)
{
	(void)f;
	snprintf(out, outlen, "nats %s", s->upstream);
	return true;
}

/* A system-account user: user and password[_env], or token[_env]. */
static int parse(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c)
{
	struct nats_conf *k = c->kind = pfs_xcalloc(1, sizeof *k);
	const char *user = NULL, *password = NULL, *token = NULL;

	if (pfs_conf_string(p, obj, "user", where, &user) ||
	    pfs_conf_secret(p, obj, "password", where, &password) ||
	    pfs_conf_secret(p, obj, "token", where, &token))
		return -1;
	k->user = user ? pfs_xstrdup(user) : NULL;
	k->password = password ? pfs_xstrdup(password) : NULL;
	k->token = token ? pfs_xstrdup(token) : NULL;
	/* nats-server's PROFILEZ answers a cpu duration over 15 s with an error */
	if (c->cpu_seconds > PFS_NATS_CPU_MAX) {
		pfs_warn("config: %scpu_seconds: %g s is more than NATS PROFILEZ takes (at most "
			 "%d s); using %d s", where, c->cpu_seconds, PFS_NATS_CPU_MAX, PFS_NATS_CPU_MAX);
		c->cpu_seconds = PFS_NATS_CPU_MAX;
	}
	return 0;
}

static const char *const keys[] = {"user", "password", "password_env", "token", "token_env", NULL};

const struct pfs_source_ops pfs_source_nats = {
	.nats_url = true,
	.keys = keys,
	.parse = parse,
	.free_kind = free_kind,
	.kind = "nats",
	.rounds = PFS_ROUNDS_SCRAPE,
	.pgo = true,
	.discover = discover,
	.start = start,
	.cleanup = cleanup,
	.decode = decode,
	.cpu_key = cpu_key,
};
