/* lib/merge.c: merging snapshots over time by what their numbers mean
 * (README, "What the numbers mean"): counters as differences, gauges as
 * means, cpu as sums. */
#include "unit.h"

#include "lib/merge.h"
#include "lib/pprof.h"
#include "profile.pb-c.h"

#include <stdlib.h>

struct snap {
	uint8_t *gz;
	size_t len;
};

/* A heap-like snapshot: one stack, alloc_space (cumulative) and
 * inuse_space (gauge); or a cpu one (summed). */
static struct snap make(const char *type0, const char *type1, int64_t v0, int64_t v1)
{
	const char *types[] = {type0, type1}, *units[] = {"bytes", "bytes"};
	struct pfs_pb *b = pfs_pb_new();
	struct snap s = {0};
	char err[128];

	pfs_pb_set_types(b, types, units, 2, "space", "bytes");
	uint64_t fn = pfs_pb_function(b, pfs_pb_str(b, "main.alloc"), pfs_pb_str(b, "main.alloc"),
				      pfs_pb_str(b, "main.go"), 10);
	struct pfs_pb_line line = {fn, 12};
	uint64_t loc = pfs_pb_location(b, 0, 0x1000, &line, 1, 0);
	int64_t values[] = {v0, v1};
	pfs_pb_sample(b, &loc, 1, values, NULL, 0);
	pfs_pb_set_meta(b, 0, 0, 512 * 1024);
	CHECK(pfs_pb_finish(b, &s.gz, &s.len, err, sizeof err) == 0);
	return s;
}

/* The merge's total of each of the two sample types. */
static void merged_totals(const struct pfs_merge_in *in, size_t n, int64_t out[2])
{
	struct pfs_merge_rules rules = {0};
	uint8_t *gz = NULL;
	size_t len = 0;
	char err[256];

	out[0] = out[1] = -1;
	CHECK(pfs_pprof_merge_range(in, n, 1 << 20, &rules, "test", NULL, &gz, &len, err,
				    sizeof err) == 0);
	Perftools__Profiles__Profile *p = pfs_pprof_decode_gz(gz, len, 1 << 20, err, sizeof err);
	CHECK(p != NULL);
	if (p) {
		out[0] = out[1] = 0;
		for (size_t i = 0; i < p->n_sample; i++)
			for (size_t k = 0; k < 2 && k < p->sample[i]->n_value; k++)
				out[k] += p->sample[i]->value[k];
	}
	pfs_pprof_free(p);
	free(gz);
}

static void counters_and_gauges(void)
{
	struct snap base = make("alloc_space", "inuse_space", 500, 99);
	struct snap a = make("alloc_space", "inuse_space", 1000, 10);
	struct snap b = make("alloc_space", "inuse_space", 3000, 30);
	struct snap restart = make("alloc_space", "inuse_space", 200, 20);
	struct pfs_merge_in in[] = {
		{base.gz, base.len, 0, 50, true, "t"},
		{a.gz, a.len, 0, 100, false, "t"},
		{b.gz, b.len, 0, 200, false, "t"},
	};
	int64_t tot[2];

	/* alloc: 1000-500 + 3000-1000; inuse: the mean of the range's two */
	merged_totals(in, 3, tot);
	CHECK_NUM(tot[0], 2500);
	CHECK_NUM(tot[1], 20);
	/* without a base, the first snapshot only begins the series */
	merged_totals(in + 1, 2, tot);
	CHECK_NUM(tot[0], 2000);
	/* a restart (the total went down) counts the later snapshot whole */
	struct pfs_merge_in rs[] = {in[1], in[2], {restart.gz, restart.len, 0, 300, false, "t"}};
	merged_totals(rs, 3, tot);
	CHECK_NUM(tot[0], 2000 + 200);
	CHECK_NUM(tot[1], 20); /* (10 + 30 + 20) / 3 */
	/* two targets: their differences and their means add up */
	struct pfs_merge_in two[] = {in[1], in[2], {a.gz, a.len, 1, 100, false, "u"},
				     {b.gz, b.len, 1, 200, false, "u"}};
	merged_totals(two, 4, tot);
	CHECK_NUM(tot[0], 4000);
	CHECK_NUM(tot[1], 40);
	free(base.gz);
	free(a.gz);
	free(b.gz);
	free(restart.gz);
}

static void cpu_sums(void)
{
	struct snap a = make("samples", "cpu", 3, 30000000);
	struct snap b = make("samples", "cpu", 5, 50000000);
	struct pfs_merge_in in[] = {{a.gz, a.len, 0, 100, false, "t"},
				    {b.gz, b.len, 0, 200, false, "t"}};
	int64_t tot[2];

	merged_totals(in, 2, tot);
	CHECK_NUM(tot[0], 8);
	CHECK_NUM(tot[1], 80000000);
	free(a.gz);
	free(b.gz);
}

static void rules(void)
{
	CHECK(pfs_merge_rule_go("alloc_space", "bytes") == PFS_RULE_CUMULATIVE);
	CHECK(pfs_merge_rule_go("contentions", "count") == PFS_RULE_CUMULATIVE);
	CHECK(pfs_merge_rule_go("inuse_objects", "count") == PFS_RULE_GAUGE);
	CHECK(pfs_merge_rule_go("goroutine", "count") == PFS_RULE_GAUGE);
	CHECK(pfs_merge_rule_go("cpu", "nanoseconds") == PFS_RULE_SUM);
	CHECK(pfs_merge_rule_window("alloc_space", "bytes") == PFS_RULE_SUM);
	CHECK(pfs_merge_rule_window("inuse_space", "bytes") == PFS_RULE_GAUGE);
}

int main(void)
{
	counters_and_gauges();
	cpu_sums();
	rules();
	return UNIT_END();
}
