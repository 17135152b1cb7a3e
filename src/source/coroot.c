/* Source kind "coroot": Coroot has no pprof export, so profiles are made
 * from its profiling view's flame graph.
 *   login     POST /api/login {"email","password"} -> cookie coroot_session
 *   project   GET /api/user -> projects[{id,name}]: the id of `project`
 *   services  GET /api/project/<p>/overview/applications -> data.applications[].id
 *   files     GET /api/project/<p>/app/<id>/profiling -> data.profiles[].type
 *   bytes     the same with query={"type","from","to"} and from/to, all in
 *             unix ms (coroot's timeseries.Time decodes ms; seconds there
 *             would ask about January 1970): data.profile.flamegraph, a tree of {name,total,self,
 *             children}, turned into a profile.proto whose samples are the
 *             tree's self values (stacks root to node); cpu types get
 *             Go's samples/count + cpu/nanoseconds sample types. */
#include "source.h"

#include "lib/confparse.h"

#include "lib/log.h"
#include "lib/merge.h"
#include "lib/xalloc.h"
#include "lib/secrets.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The kind's own settings (c->kind): the project and the login. */
struct coroot_conf {
	char *project; /* name or id */
	char *email, *password; /* the login */
};

static struct coroot_conf *conf(const struct pfs_cluster *c) { return c->kind; }

static void free_kind(void *kind)
{
	struct coroot_conf *k = kind;

	free(k->project);
	free(k->email);
	pfs_secret_free(k->password);
	free(k);
}

#define CPU_PERIOD 10000000 /* ns per sample, as Go's 100 Hz profiler */

/* The cluster's target with the session cookie added. Replaced on a new
 * login; old ones stay (fetches in flight may use them). */
struct session {
	struct pfs_cluster *c;
	struct pfs_target t;
	char *project; /* the project's id, which Coroot's URLs take */
	struct session *next;
};
static struct session *g_sessions;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* The cluster's newest session (they live until exit), or NULL. */
static const struct session *session_of(struct pfs_cluster *c)
{
	const struct session *found = NULL;

	pthread_mutex_lock(&g_lock);
	for (struct session *s = g_sessions; s && !found; s = s->next)
		if (s->c == c)
			found = s;
	pthread_mutex_unlock(&g_lock);
	return found;
}

/* `project` in the config is Coroot's project id (8 characters, in its
 * URLs) or the name users know it by: GET /api/user lists the projects
 * the user sees, {"projects": [{"id", "name"}]} (an id matches first). */
static int resolve_project(struct pfs_cluster *c, const struct pfs_target *t, char **id,
			   char *err, size_t errlen)
{
	const char *want = conf(c)->project;
	char url[2048], why[512], seen[512] = "";
	uint8_t *body;
	size_t len, i, o = 0;
	json_t *root, *projects, *p;

	snprintf(url, sizeof url, "%s/api/user", c->api.target.url);
	if (pfs_http_sync(t, url, NULL, NULL, 0, &body, &len, why, sizeof why)) {
		snprintf(err, errlen, "projects (/api/user): %s", why);
		return -1;
	}
	root = json_loadb((const char *)body, len, 0, NULL);
	free(body);
	projects = json_object_get(root, "projects");
	if (!json_is_array(projects) && !json_is_null(projects)) {
		snprintf(err, errlen, "projects (/api/user): HTTP 200, no \"projects\" list");
		json_decref(root);
		return -1;
	}
	*id = NULL;
	for (int by_name = 0; by_name < 2 && !*id; by_name++)
		json_array_foreach(projects, i, p) {
			const char *pid = json_string_value(json_object_get(p, "id"));
			const char *name = json_string_value(json_object_get(p, "name"));
			if (pid && *pid && !*id && strcmp(by_name ? (name ? name : "") : pid, want) == 0)
				*id = pfs_xstrdup(pid);
			if (!by_name && o < sizeof seen)
				o += (size_t)snprintf(seen + o, sizeof seen - o, "%s%s (%s)", i ? ", " : "",
						      name ? name : "", pid ? pid : "");
		}
	json_decref(root);
	if (!*id) {
		snprintf(err, errlen, "project \"%s\" is neither the id nor the name of a project "
			 "%s sees (%s)", want, conf(c)->email, o ? seen : "none");
		return -1;
	}
	if (strcmp(*id, want))
		pfs_debug("%s: coroot project \"%s\" has id %s", c->name, want, *id);
	return 0;
}

static void on_header(const char *line, size_t len, void *arg)
{
	static const char key[] = "set-cookie: coroot_session=";
	char **cookie = arg;

	if (len > sizeof key && strncasecmp(line, key, sizeof key - 1) == 0) {
		const char *v = line + sizeof key - 1;
		free(*cookie);
		*cookie = pfs_xstrndup(v, strcspn(v, ";\r\n"));
	}
}

static void session_free(struct session *s)
{
	/* the cookie line is ours; the others are the cluster's */
	char *cookie = s->t.headers[s->t.n_headers - 1];
	pfs_secret_free(cookie);
	free(s->t.headers);
	free(s->project);
	free(s);
}

/* Log in (a session per discovery run: an expired cookie is renewed) and
 * find the project's id. */
static int login(struct pfs_cluster *c, char *err, size_t errlen)
{
	const struct pfs_target *base = &c->api.target;
	json_t *req = json_pack("{s:s, s:s}", "email", conf(c)->email, "password", conf(c)->password);
	char url[2048], why[512], *json = json_dumps(req, JSON_COMPACT), *cookie = NULL;
	uint8_t *body = NULL;
	size_t len;
	int rc;

	json_decref(req);
	snprintf(url, sizeof url, "%s/api/login", base->url);
	rc = pfs_http_sync_ex(base, url, "application/json", (const uint8_t *)json, strlen(json),
			      on_header, &cookie, &body, &len, why, sizeof why);
	pfs_secret_free(json);
	free(body);
	if (rc || !cookie) {
		snprintf(err, errlen, "login: %s", rc ? why : "HTTP 200, no coroot_session cookie");
		free(cookie);
		return -1;
	}
	struct session *s = pfs_xcalloc(1, sizeof *s);
	s->c = c;
	s->t = *base;
	s->t.headers = pfs_xcalloc(base->n_headers + 1, sizeof *s->t.headers);
	memcpy(s->t.headers, base->headers, base->n_headers * sizeof *s->t.headers);
	size_t n = strlen(cookie) + 32;
	s->t.headers[base->n_headers] = pfs_xmalloc(n);
	snprintf(s->t.headers[base->n_headers], n, "Cookie: coroot_session=%s", cookie);
	s->t.n_headers = base->n_headers + 1;
	pfs_secret_free(cookie);
	if (resolve_project(c, &s->t, &s->project, err, errlen)) {
		session_free(s);
		return -1;
	}
	pthread_mutex_lock(&g_lock);
	s->next = g_sessions; /* newest first: session_of finds it */
	g_sessions = s;
	pthread_mutex_unlock(&g_lock);
	return 0;
}

/* The "data" object of a Coroot API answer. */
static int parse_data(const uint8_t *body, size_t len, const char *what, json_t **data, char *err,
		      size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb((const char *)body, len, 0, &jerr);

	if (!root || !json_is_object(json_object_get(root, "data"))) {
		/* coroot answers an unknown project with 200 and "data": null */
		snprintf(err, errlen, "%s: HTTP 200, %s", what,
			 !root ? "bad JSON"
			 : json_is_null(json_object_get(root, "data"))
			       ? "\"data\": null (an unknown project, or no data yet)"
			       : "no \"data\" object");
		json_decref(root);
		return -1;
	}
	*data = json_incref(json_object_get(root, "data"));
	json_decref(root);
	return 0;
}

static int get_json(const struct pfs_target *t, const char *url, const char *what, json_t **data,
		    char *err, size_t errlen)
{
	uint8_t *body;
	size_t len;
	char why[512];
	int rc;

	if (pfs_http_sync(t, url, NULL, NULL, 0, &body, &len, why, sizeof why)) {
		snprintf(err, errlen, "%s: %s", what, why);
		return -1;
	}
	rc = parse_data(body, len, what, data, err, errlen);
	free(body);
	return rc;
}

/* "cpu" for the CPU types, else the type's middle part ("heap_inuse_space"). */
static void pretty_name(const char *type, char *out, size_t outlen)
{
	const char *a = strchr(type, ':'), *b = a ? strchr(a + 1, ':') : NULL;

	if (!a || !b)
		snprintf(out, outlen, "%s", type);
	else if (strncmp(a + 1, "profile_cpu:", 12) == 0 || strncmp(a + 1, "cpu:", 4) == 0)
		snprintf(out, outlen, "cpu");
	else
		snprintf(out, outlen, "%.*s", (int)(b - a - 1), a + 1);
}

/* The project part of a URL (escaped, malloc'd): the session's id. */
static char *project_of(const struct session *s, struct pfs_cluster *c)
{
	return pfs_url_escape(s ? s->project : conf(c)->project);
}

static void app_url(const struct session *s, struct pfs_cluster *c, const char *app, char *out,
		    size_t outlen)
{
	char *p = project_of(s, c), *a = pfs_url_escape(app);
	snprintf(out, outlen, "%s/api/project/%s/app/%s/profiling", c->api.target.url, p, a);
	free(p);
	free(a);
}

/* The name users know an app by, from its ApplicationId
 * "<cluster>:<namespace>:<kind>:<name>" (older Coroot: no cluster):
 * "<namespace>.<name>" as Kubernetes discovery names services; with
 * detail 1 ".<kind>" added, with 2 "<cluster>." too. An id of another
 * shape is its own name. */
static void app_name(const char *id, int detail, char *out, size_t outlen)
{
	const char *part[4];
	size_t len[4], n = 0;

	for (const char *p = id; n < 4; n++) {
		const char *colon = strchr(p, ':');
		part[n] = p;
		len[n] = colon ? (size_t)(colon - p) : strlen(p);
		if (!colon) {
			n++;
			break;
		}
		p = colon + 1;
	}
	if (n < 3 || (n == 4 && strchr(part[3], ':'))) {
		snprintf(out, outlen, "%s", id);
		return;
	}
	size_t o = n == 4 ? 1 : 0; /* the namespace's index */
	int w = 0;
	if (detail >= 2 && o)
		w += snprintf(out, outlen, "%.*s.", (int)len[0], part[0]);
	snprintf(out + w, outlen - (size_t)w, "%.*s%s%.*s%s%.*s", (int)len[o], part[o],
		 len[o] ? "." : "", (int)len[o + 2], part[o + 2], detail >= 1 ? "." : "",
		 detail >= 1 ? (int)len[o + 1] : 0, part[o + 1]);
}

/* Each app's name: as short as it can be and still be the only one of
 * the apps with it (the same names on every mount for the same apps). */
static void app_names(const char *const *ids, size_t n, char (*names)[512])
{
	int *detail = pfs_xcalloc(n ? n : 1, sizeof *detail);

	for (int level = 0; level <= 2; level++) {
		for (size_t i = 0; i < n; i++)
			if (detail[i] == level)
				app_name(ids[i], level, names[i], sizeof names[i]);
		for (size_t i = 0; i < n && level < 2; i++)
			for (size_t j = 0; j < n; j++)
				if (i != j && detail[i] == level && strcmp(names[i], names[j]) == 0) {
					detail[i] = level + 1;
					break;
				}
	}
	free(detail);
}

/* An app's profile types from its profiling view (f: its answer). */
static void add_app(struct pfs_cluster *c, const char *app, const char *name,
		    struct pfs_fetch *f)
{
	char err[512];
	json_t *data, *profiles, *p;
	struct pfs_cluster types = {0}; /* a scratch list, for pfs_registry_add_type */
	size_t i;

	if (!f->ok) {
		pfs_warn("%s: app %s: profiling: %s", c->name, app, f->error);
		return;
	}
	if (parse_data(f->body, f->len, "profiling", &data, err, sizeof err)) {
		pfs_warn("%s: app %s: %s", c->name, app, err);
		return;
	}
	profiles = json_object_get(data, "profiles");
	json_array_foreach(profiles, i, p) {
		const char *type = json_string_value(json_object_get(p, "type"));
		char pretty[128];
		if (!type || !*type)
			continue;
		pretty_name(type, pretty, sizeof pretty);
		pfs_registry_add_type(&types, type, pretty);
	}
	json_decref(data);
	pfs_registry_add_service(c, app, name, types.types, types.n_types);
	for (i = 0; i < types.n_types; i++)
		free(types.types[i].type_id);
	free(types.types);
}

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	char url[2048], *p;
	time_t now = time(NULL);
	json_t *data, *apps, *a;
	size_t i;

	if (login(c, err, errlen))
		return -1;
	const struct session *s = session_of(c);
	p = project_of(s, c);
	snprintf(url, sizeof url, "%s/api/project/%s/overview/applications?from=%lld&to=%lld",
		 c->api.target.url, p, (long long)(now - (time_t)c->api.range) * 1000,
		 (long long)now * 1000);
	free(p);
	const struct pfs_target *t = &s->t;
	if (get_json(t, url, "applications", &data, err, errlen))
		return -1;
	/* every app's profiling view at once: a hanging app costs one
	 * timeout, not one each */
	apps = json_object_get(data, "applications");
	size_t n = 0, cap = json_array_size(apps);
	const char **ids = pfs_xcalloc(cap ? cap : 1, sizeof *ids);
	char **urls = pfs_xcalloc(cap ? cap : 1, sizeof *urls);
	struct pfs_fetch *res = pfs_xcalloc(cap ? cap : 1, sizeof *res);
	json_array_foreach(apps, i, a) {
		const char *id = json_string_value(json_object_get(a, "id"));
		if (!id || !*id)
			continue;
		ids[n] = id;
		urls[n] = pfs_xmalloc(4096);
		app_url(s, c, id, urls[n++], 4096);
	}
	pfs_http_sync_many(t, urls, n, res);
	char (*names)[512] = pfs_xcalloc(n ? n : 1, sizeof *names);
	app_names((const char *const *)ids, n, names);
	for (i = 0; i < n; i++) {
		add_app(c, ids[i], names[i], &res[i]);
		pfs_fetch_release(&res[i]);
		free(urls[i]);
	}
	free(names);
	free(ids);
	free(urls);
	free(res);
	json_decref(data);
	return 0;
}

/* ---- flame graph -> profile.proto ---- */

/* Deepest stack taken from a flame graph; deeper is an error. */
#define MAX_DEPTH 1024

struct conv {
	struct pfs_pb *b;
	uint64_t stack[MAX_DEPTH];      /* location ids, root first */
	uint64_t leaf_first[MAX_DEPTH];
	bool cpu;
	int64_t total;
	char *err;
	size_t errlen;
};

/* A node being walked and the index of its next child. */
struct frame {
	json_t *node;
	size_t next;
};

static int add_node(struct conv *cv, json_t *node, size_t depth)
{
	json_int_t self = json_integer_value(json_object_get(node, "self"));
	const char *name = json_string_value(json_object_get(node, "name"));

	if (!name) {
		snprintf(cv->err, cv->errlen, "flamegraph node without a name");
		return -1;
	}
	int64_t fn = pfs_pb_str(cv->b, name);
	uint64_t f = pfs_pb_function(cv->b, fn, fn, 0, 0);
	struct pfs_pb_line line = {f, 0};
	cv->stack[depth - 1] = pfs_pb_location(cv->b, 0, 0, &line, 1, 0);
	if (self > 0) {
		int64_t v[2] = {self / CPU_PERIOD, self};
		for (size_t k = 0; k < depth; k++)
			cv->leaf_first[k] = cv->stack[depth - 1 - k];
		if (cv->cpu && v[0] == 0)
			v[0] = 1;
		pfs_pb_sample(cv->b, cv->leaf_first, depth, cv->cpu ? v : &v[1], NULL, 0);
		if (__builtin_add_overflow(cv->total, self, &cv->total)) {
			snprintf(cv->err, cv->errlen, "flamegraph values overflow");
			return -1;
		}
	}
	return 0;
}

/* Every node below the root becomes a location; its self value a sample
 * of the stack from the root's child down to it. Iterative, depth-bounded:
 * upstream JSON decides the depth. */
static int walk(struct conv *cv, json_t *root)
{
	struct frame *st = pfs_xcalloc(MAX_DEPTH + 1, sizeof *st);
	size_t depth = 0; /* st[0] is the root, which is no frame */
	int rc = 0;

	st[0].node = root;
	while (rc == 0) {
		struct frame *top = &st[depth];
		json_t *ch = json_array_get(json_object_get(top->node, "children"), top->next);
		if (!ch) {
			if (depth-- == 0)
				break;
			continue;
		}
		top->next++;
		if (depth == MAX_DEPTH) {
			snprintf(cv->err, cv->errlen, "flamegraph deeper than %d frames", MAX_DEPTH);
			rc = -1;
			break;
		}
		st[++depth] = (struct frame){ch, 0};
		rc = add_node(cv, ch, depth);
	}
	free(st);
	return rc;
}

static int decode(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz, size_t *gzlen,
		  char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb((const char *)body, len, 0, &jerr), *data, *prof, *fg;
	const char *type = j->file->type_id, *got, *status;
	char unit[64] = "count", sample[128];
	int rc = -1;

	if (!root) {
		snprintf(err, errlen, "bad JSON: %s", jerr.text);
		return -1;
	}
	data = json_object_get(root, "data");
	prof = json_object_get(data, "profile");
	fg = json_object_get(prof, "flamegraph");
	got = json_string_value(json_object_get(prof, "type"));
	status = json_string_value(json_object_get(data, "status"));
	if (!json_is_object(data)) {
		snprintf(err, errlen, "no \"data\" object");
	} else if (json_is_null(fg) || !fg) {
		/* "No profiles found": no data for this window; other statuses
		 * (a ClickHouse error) are failures */
		if (status && strcmp(status, "warning") == 0)
			snprintf(err, errlen, "coroot: %s",
				 json_string_value(json_object_get(data, "message")) ?: "warning");
		else
			rc = PFS_ABSENT;
	} else if (!got || strcmp(got, type)) {
		snprintf(err, errlen, "asked for profile type %s, got %s", type, got ? got : "none");
	} else {
		struct conv *cv = pfs_xcalloc(1, sizeof *cv);
		cv->b = pfs_pb_new();
		cv->err = err;
		cv->errlen = errlen;
		const char *u = strrchr(type, ':');
		pretty_name(type, sample, sizeof sample);
		if (u)
			snprintf(unit, sizeof unit, "%s", u + 1);
		cv->cpu = strcmp(sample, "cpu") == 0 && strcmp(unit, "nanoseconds") == 0;
		if (cv->cpu) {
			const char *t[] = {"samples", "cpu"}, *un[] = {"count", "nanoseconds"};
			pfs_pb_set_types(cv->b, t, un, 2, "cpu", "nanoseconds");
			pfs_pb_set_meta(cv->b, (int64_t)j->from * 1000000000,
					(int64_t)(j->to - j->from) * 1000000000, CPU_PERIOD);
		} else {
			const char *t[] = {sample}, *un[] = {unit};
			pfs_pb_set_types(cv->b, t, un, 1, sample, unit);
			pfs_pb_set_meta(cv->b, (int64_t)j->from * 1000000000,
					(int64_t)(j->to - j->from) * 1000000000, 1);
		}
		if (walk(cv, fg) == 0 && cv->total > 0) {
			rc = pfs_pb_finish(cv->b, gz, gzlen, err, errlen);
		} else {
			rc = cv->total == 0 && !err[0] ? PFS_ABSENT : -1;
			pfs_pb_free(cv->b);
		}
		free(cv);
	}
	json_decref(root);
	return rc;
}

static void start(struct pfs_job *j)
{
	struct pfs_cluster *c = j->svc->cluster;
	const struct session *s = session_of(c);
	json_t *query = json_pack("{s:s, s:I, s:I}", "type", j->file->type_id, "from",
				  (json_int_t)j->from * 1000, "to", (json_int_t)j->to * 1000);
	char base[4096], *q = json_dumps(query, JSON_COMPACT | JSON_PRESERVE_ORDER), *qe;

	json_decref(query);
	app_url(s, c, j->svc->upstream, base, sizeof base);
	qe = pfs_url_escape(q);
	free(q);
	pfs_job_set(&j->url, "%s?query=%s&from=%lld&to=%lld", base, qe,
		 (long long)j->from * 1000, (long long)j->to * 1000);
	free(qe);
	pfs_job_set(&j->what, "%s/api/project/.../app/%s/profiling (%s)",
		 c->api.target.log_url, j->svc->upstream, j->file->type_id);
	pfs_http_start(j, s ? &s->t : &c->api.target, NULL, decode);
}

static void cleanup(void)
{
	pthread_mutex_lock(&g_lock);
	while (g_sessions) {
		struct session *s = g_sessions;
		g_sessions = s->next;
		session_free(s);
	}
	pthread_mutex_unlock(&g_lock);
}

/* project (name or id), and the login: email, password[_env]. */
static int parse(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c)
{
	struct coroot_conf *k = c->kind = pfs_xcalloc(1, sizeof *k);
	const char *project = NULL, *email = NULL, *password = NULL;
	char field[512];

	if (pfs_conf_string(p, obj, "project", where, &project) ||
	    pfs_conf_string(p, obj, "email", where, &email) ||
	    pfs_conf_secret(p, obj, "password", where, &password))
		return -1;
	if (!project || !email || !password) {
		snprintf(field, sizeof field, "%s%s", where,
			 !project ? "project" : !email ? "email" : "password");
		return pfs_conf_fail(p, field, "is required for kind \"coroot\"");
	}
	k->project = pfs_xstrdup(project);
	k->email = pfs_xstrdup(email);
	k->password = pfs_xstrdup(password);
	return 0;
}

static const char *const keys[] = {"project", "email", "password", "password_env", NULL};

const struct pfs_source_ops pfs_source_coroot = {
	.keys = keys,
	.parse = parse,
	.free_kind = free_kind,
	.kind = "coroot",
	.rounds = PFS_ROUNDS_WINDOW,
	.pgo = false, /* flame graphs: no line numbers */
	.discover = discover,
	.start = start,
	.cleanup = cleanup,
	.decode = decode,
};
