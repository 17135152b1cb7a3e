/* lib/confparse.c: durations, unknown keys, targets. */
#include "unit.h"

#include "lib/confparse.h"
#include "lib/target.h"

static void durations(void)
{
	CHECK_NUM(pfs_conf_parse_duration("500ms"), 0.5);
	CHECK_NUM(pfs_conf_parse_duration("10s"), 10);
	CHECK_NUM(pfs_conf_parse_duration("10"), 10);
	CHECK_NUM(pfs_conf_parse_duration("5m"), 300);
	CHECK_NUM(pfs_conf_parse_duration("1h"), 3600);
	CHECK_NUM(pfs_conf_parse_duration("7d"), 7 * 86400);
	CHECK_NUM(pfs_conf_parse_duration("1.5h"), 5400);
	CHECK_NUM(pfs_conf_parse_duration(" 1s"), -1);
	CHECK_NUM(pfs_conf_parse_duration("-1s"), -1);
	CHECK_NUM(pfs_conf_parse_duration("1x"), -1);
	CHECK_NUM(pfs_conf_parse_duration("s"), -1);
	CHECK_NUM(pfs_conf_parse_duration("nan"), -1);
	CHECK_NUM(pfs_conf_parse_duration("inf"), -1);
	CHECK_NUM(pfs_conf_parse_duration("1e999"), -1);
}

static void keys(void)
{
	char err[512];
	struct pfs_parser p = {.path = "/etc/profilefs.json", .err = err, .errlen = sizeof err};
	static const char *const allowed[] = {"retention", "latest_ttl", NULL};
	json_t *obj = json_pack("{s:i}", "retension", 1);

	CHECK(pfs_conf_keys(&p, obj, "", allowed) == -1);
	CHECK_STR(err, "config /etc/profilefs.json: retension: unknown field; did you mean "
		       "\"retention\"?");
	json_decref(obj);
	obj = json_pack("{s:i}", "a/b", 1);
	CHECK(pfs_conf_keys(&p, obj, "clusters.", allowed) == -1);
	CHECK_STR(err, "config /etc/profilefs.json: clusters.\"a/b\": unknown field");
	json_decref(obj);
}

static void targets(void)
{
	char err[512];
	struct pfs_parser p = {.path = "c.json", .err = err, .errlen = sizeof err};
	struct pfs_settings s = {.timeout = 10};
	struct pfs_target t = {0};
	json_t *v = json_string("http://user:pw@10.0.0.1:6060/debug/?token=x");

	CHECK(pfs_conf_target(&p, v, "clusters.a.services.b.targets[0]", &s, false, &t) == 0);
	CHECK_STR(t.log_url, "http://10.0.0.1:6060/debug/"); /* no userinfo, no query */
	CHECK_STR(t.name, "10.0.0.1_6060");
	CHECK(p.has_secrets);
	pfs_target_free(&t);
	json_decref(v);
	v = json_string("ftp://x");
	CHECK(pfs_conf_target(&p, v, "t", &s, false, &t) == -1);
	CHECK_STR(err, "config c.json: t.url: must be an http:// or https:// URL");
	pfs_target_free(&t);
	json_decref(v);
	/* a header set twice keeps the last one */
	pfs_target_add_header(&t, "X-Scope-OrgID", "a");
	pfs_target_add_header(&t, "X-Scope-OrgID", "b");
	CHECK(t.n_headers == 1);
	CHECK_STR(t.headers[0], "X-Scope-OrgID: b");
	pfs_target_free(&t);
}

int main(void)
{
	durations();
	keys();
	targets();
	return UNIT_END();
}
