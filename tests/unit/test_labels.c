/* discovery/labels.c: label sets and Prometheus target groups. */
#include "unit.h"

#include "discovery/sd.h"

static void labels(void)
{
	struct pfs_labels l = {0}, c = {0};

	pfs_labels_set(&l, "__address__", "10.0.0.1:6060");
	pfs_labels_set(&l, "job", "a");
	pfs_labels_set(&l, "job", "b");
	CHECK(l.n == 2);
	CHECK_STR(pfs_labels_get(&l, "job"), "b");
	CHECK(pfs_labels_get(&l, "nope") == NULL);
	pfs_labels_copy(&l, &c);
	pfs_labels_set(&l, "job", "c");
	CHECK_STR(pfs_labels_get(&c, "job"), "b");
	pfs_labels_free(&l);
	pfs_labels_free(&c);
	CHECK(pfs_label_name_ok("__meta_kubernetes_pod_name"));
	CHECK(pfs_label_name_ok("_a1"));
	CHECK(!pfs_label_name_ok("1a"));
	CHECK(!pfs_label_name_ok("a-b"));
	CHECK(!pfs_label_name_ok(""));
}

static void groups(void)
{
	const char *text = "[{\"targets\": [\"10.0.0.1:6060\", \"10.0.0.2:6060\"],"
			   "  \"labels\": {\"service\": \"checkout\"}},"
			   " {\"targets\": [\"10.0.0.3:6060\"]}]";
	struct pfs_sd_set set = {0};
	char err[256];

	CHECK(pfs_sd_parse_groups(text, strlen(text), "__meta_filepath", "/etc/t.json", 100, &set,
				  err, sizeof err) == 0);
	CHECK(set.n == 3);
	CHECK_STR(pfs_labels_get(&set.t[1], "__address__"), "10.0.0.2:6060");
	CHECK_STR(pfs_labels_get(&set.t[1], "service"), "checkout");
	CHECK_STR(pfs_labels_get(&set.t[2], "__meta_filepath"), "/etc/t.json");
	CHECK(pfs_labels_get(&set.t[2], "service") == NULL);
	pfs_sd_set_free(&set);
	/* over max targets, and a label name Prometheus would not take */
	CHECK(pfs_sd_parse_groups(text, strlen(text), "m", "v", 2, &set, err, sizeof err) == -1);
	pfs_sd_set_free(&set);
	const char *bad = "[{\"targets\": [\"h:1\"], \"labels\": {\"a-b\": \"x\"}}]";
	CHECK(pfs_sd_parse_groups(bad, strlen(bad), "m", "v", 10, &set, err, sizeof err) == -1);
	pfs_sd_set_free(&set);
	CHECK(pfs_sd_parse_groups("{", 1, "m", "v", 10, &set, err, sizeof err) == -1);
	pfs_sd_set_free(&set);
}

int main(void)
{
	labels();
	groups();
	return UNIT_END();
}
