/* Source kind "pyroscope": Grafana Pyroscope's querier API, Connect unary
 * over HTTP with Content-Type: application/proto.
 *   services  LabelValues(name=<label>) over the range
 *   files     ProfileTypes over the range (every service gets every type)
 *   bytes     SelectMergeProfile(type, {<label>="<service>"}, window):
 *             an uncompressed profile.proto, gzip'd here; no samples means
 *             no data (the file is not shown). */
#include "source.h"

#include "lib/confparse.h"

#include "lib/mem.h"
#include "lib/pprof.h"
#include "profile.pb-c.h"
#include "querier.pb-c.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kind's own settings (c->kind): the label. */
struct pyroscope_conf {
	char *label; /* whose values are the services */
};

static struct pyroscope_conf *conf(const struct pfs_cluster *c) { return c->kind; }

static void free_kind(void *kind)
{
	struct pyroscope_conf *k = kind;

	free(k->label);
	free(k);
}

#define SERVICE_PATH "/querier.v1.QuerierService/"

static int call(struct pfs_cluster *c, const char *method, const ProtobufCMessage *req,
		uint8_t **body, size_t *len, char *err, size_t errlen)
{
	char url[2048];
	size_t n = protobuf_c_message_get_packed_size(req);
	uint8_t *buf = pfs_xmalloc(n ? n : 1);
	int rc;

	protobuf_c_message_pack(req, buf);
	snprintf(url, sizeof url, "%s" SERVICE_PATH "%s", c->api.target.url, method);
	rc = pfs_http_sync(&c->api.target, url, "application/proto", buf, n, body, len, err, errlen);
	if (rc) {
		char why[512];
		snprintf(why, sizeof why, "%s: %s", method, err);
		snprintf(err, errlen, "%s", why);
	}
	free(buf);
	return rc;
}

/* "cpu" for process_cpu:cpu, else "<name>.<sample type>". */
static void pretty_name(const Querier__V1__ProfileType *t, char *out, size_t outlen)
{
	if (strcmp(t->name, "process_cpu") == 0 && strcmp(t->sample_type, "cpu") == 0)
		snprintf(out, outlen, "cpu");
	else
		snprintf(out, outlen, "%s.%s", t->name, t->sample_type);
}

static int load_types(struct pfs_cluster *c, int64_t start, int64_t end, char *err, size_t errlen)
{
	Querier__V1__ProfileTypesRequest req = QUERIER__V1__PROFILE_TYPES_REQUEST__INIT;
	Querier__V1__ProfileTypesResponse *resp;
	uint8_t *body;
	size_t len;

	req.start = start;
	req.end = end;
	if (call(c, "ProfileTypes", &req.base, &body, &len, err, errlen))
		return -1;
	resp = querier__v1__profile_types_response__unpack(NULL, len, body);
	free(body);
	if (!resp) {
		snprintf(err, errlen, "ProfileTypes: HTTP 200, not a ProfileTypesResponse");
		return -1;
	}
	pthread_mutex_lock(&c->lock);
	if (c->n_types == 0) /* services keep the files they were made with */
		for (size_t i = 0; i < resp->n_profile_types; i++) {
			char pretty[128];
			pretty_name(resp->profile_types[i], pretty, sizeof pretty);
			pfs_registry_add_type(c, resp->profile_types[i]->id, pretty);
		}
	pthread_mutex_unlock(&c->lock);
	querier__v1__profile_types_response__free_unpacked(resp, NULL);
	return 0;
}

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	Querier__V1__LabelValuesRequest req = QUERIER__V1__LABEL_VALUES_REQUEST__INIT;
	Querier__V1__LabelValuesResponse *resp;
	int64_t end = (int64_t)time(NULL) * 1000, start = end - (int64_t)(c->api.range * 1000);
	uint8_t *body;
	size_t len;

	if (load_types(c, start, end, err, errlen))
		return -1;
	req.name = conf(c)->label;
	req.start = start;
	req.end = end;
	if (call(c, "LabelValues", &req.base, &body, &len, err, errlen))
		return -1;
	resp = querier__v1__label_values_response__unpack(NULL, len, body);
	free(body);
	if (!resp) {
		snprintf(err, errlen, "LabelValues: HTTP 200, not a LabelValuesResponse");
		return -1;
	}
	for (size_t i = 0; i < resp->n_names; i++)
		if (resp->names[i][0])
			pfs_registry_add_service(c, resp->names[i], resp->names[i], c->types, c->n_types);
	querier__v1__label_values_response__free_unpacked(resp, NULL);
	return 0;
}

static int decode(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz, size_t *gzlen,
		  char *err, size_t errlen)
{
	/* no data is an empty Profile message: not a valid pprof, so no
	 * pfs_pprof_decode_raw() here (validation follows for the rest) */
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(&pfs_mem_pb, len, body);
	size_t n;

	(void)j;
	if (!p) {
		snprintf(err, errlen, "invalid profile: not a profile.proto (protobuf decode failed)");
		return -1;
	}
	n = p->n_sample;
	pfs_pprof_free(p);
	if (n == 0)
		return PFS_ABSENT;
	return pfs_gzip(body, len, gz, gzlen, err, errlen);
}

static void start(struct pfs_job *j)
{
	struct pfs_cluster *c = j->svc->cluster;
	Querier__V1__SelectMergeProfileRequest req = QUERIER__V1__SELECT_MERGE_PROFILE_REQUEST__INIT;
	char sel[1024];

	pfs_label_selector(conf(c)->label, j->svc->upstream, sel, sizeof sel);
	req.profile_typeid = j->file->type_id;
	req.label_selector = sel;
	req.start = (int64_t)j->from * 1000;
	req.end = (int64_t)j->to * 1000;
	j->post_len = querier__v1__select_merge_profile_request__get_packed_size(&req);
	j->post = pfs_xmalloc(j->post_len ? j->post_len : 1);
	querier__v1__select_merge_profile_request__pack(&req, j->post);
	pfs_job_set(&j->url, "%s" SERVICE_PATH "SelectMergeProfile", c->api.target.url);
	pfs_job_set(&j->what, "%s" SERVICE_PATH "SelectMergeProfile (%s, %s)",
		 c->api.target.log_url, j->file->type_id, sel);
	pfs_http_start(j, &c->api.target, "application/proto", decode);
}

/* tenant: X-Scope-OrgID (multi-tenant Pyroscope); label: whose values
 * are the services. */
static int parse(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c)
{
	struct pyroscope_conf *k = c->kind = pfs_xcalloc(1, sizeof *k);
	const char *tenant = NULL, *label = "service_name";

	if (pfs_conf_string(p, obj, "tenant", where, &tenant) ||
	    pfs_conf_string(p, obj, "label", where, &label))
		return -1;
	if (tenant)
		pfs_target_add_header(&c->api.target, "X-Scope-OrgID", tenant);
	pfs_target_add_header(&c->api.target, "Connect-Protocol-Version", "1");
	k->label = pfs_xstrdup(label);
	return 0;
}

static const char *const keys[] = {"tenant", "label", NULL};

const struct pfs_source_ops pfs_source_pyroscope = {
	.keys = keys,
	.parse = parse,
	.free_kind = free_kind,
	.kind = "pyroscope",
	.rounds = PFS_ROUNDS_WINDOW,
	.pgo = true,
	.discover = discover,
	.start = start,
	.decode = decode,
};
