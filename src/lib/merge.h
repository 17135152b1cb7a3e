/* Building and merging profile.proto profiles (google/pprof semantics). */
#ifndef PFS_MERGE_H
#define PFS_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct pfs_pb; /* a profile under construction, deduplicating as it goes */

struct pfs_pb_line {
	uint64_t function_id;
	int64_t line;
};

struct pfs_pb_label {
	int64_t key, str, num, num_unit; /* string indices of the new profile */
};

struct pfs_pb *pfs_pb_new(void);
void pfs_pb_free(struct pfs_pb *b);
/* Index of s in the string table (added once). */
int64_t pfs_pb_str(struct pfs_pb *b, const char *s);
/* Sample types and period type, as strings. Call once, before samples. */
void pfs_pb_set_types(struct pfs_pb *b, const char *const *types, const char *const *units,
		      size_t n, const char *period_type, const char *period_unit);
uint64_t pfs_pb_function(struct pfs_pb *b, int64_t name, int64_t system_name, int64_t filename,
			 int64_t start_line);
uint64_t pfs_pb_mapping(struct pfs_pb *b, uint64_t start, uint64_t limit, uint64_t offset,
			int64_t filename, int64_t build_id, unsigned has_flags);
uint64_t pfs_pb_location(struct pfs_pb *b, uint64_t mapping_id, uint64_t address,
			 const struct pfs_pb_line *lines, size_t n_lines, int is_folded);
/* Add values to the sample with these locations and labels. */
void pfs_pb_sample(struct pfs_pb *b, const uint64_t *locs, size_t n_locs, const int64_t *values,
		   const struct pfs_pb_label *labels, size_t n_labels);
/* Profile-wide fields. */
void pfs_pb_set_meta(struct pfs_pb *b, int64_t time_nanos, int64_t duration_nanos, int64_t period);
/* Serialize, gzip, and free the builder. */
int pfs_pb_finish(struct pfs_pb *b, uint8_t **gz, size_t *gzlen, char *err, size_t errlen);

/* Merge gzip'd profiles as `go tool pprof -proto a b ...` does: same sample
 * types and period type required (else an error naming both); identical
 * samples, locations, functions and mappings folded together, values
 * summed; earliest time, summed duration, largest period. */
int pfs_pprof_merge(const uint8_t *const *in, const size_t *inlen, size_t n, size_t max_raw,
		    uint8_t **gz, size_t *gzlen, char *err, size_t errlen);

/* What a merge may do to its output besides merging. */
struct pfs_merge_opts {
	size_t keep_locations;  /* 0: whole stacks; else the N leaf-most locations */
	bool aggregate_callees; /* a stack's leaf location loses its innermost
				 * line number and address: one per callee */
	bool drop_labels;
	bool need_start_line;   /* inputs without Function.start_line are left out */
	size_t *used;           /* out, may be NULL: how many inputs were merged */
};
/* As pfs_pprof_merge; PFS_MERGE_NOTHING (and why in err) if need_start_line
 * left every input out. */
#define PFS_MERGE_NOTHING 1
int pfs_pprof_merge_ex(const uint8_t *const *in, const size_t *inlen, size_t n, size_t max_raw,
		       const struct pfs_merge_opts *o, uint8_t **gz, size_t *gzlen, char *err,
		       size_t errlen);

/* A Go PGO profile (default.pgo) of cpu profiles, trimmed as Pyroscope's
 * `profilecli query go-pgo` does by default: the 5 leaf-most locations of
 * each stack, callees aggregated, no labels; inputs without
 * Function.start_line (which go build -pgo rejects) left out, *used says
 * how many were kept (an error if none). */
#define PFS_PGO_KEEP_LOCATIONS 5
int pfs_pprof_pgo(const uint8_t *const *in, const size_t *inlen, size_t n, size_t max_raw,
		  size_t *used, uint8_t **gz, size_t *gzlen, char *err, size_t errlen);

/* How a sample type's values combine over time (README, "What the
 * numbers mean"). */
enum pfs_merge_rule {
	PFS_RULE_SUM,        /* work in a window (cpu, an API's deltas): summed */
	PFS_RULE_CUMULATIVE, /* totals since the process started: per target the
			      * differences between consecutive snapshots */
	PFS_RULE_GAUGE,      /* a value at an instant: per target the mean */
};
/* The rule of a Go runtime/pprof sample type in scraped snapshots: cpu
 * and samples sum; alloc_*, contentions, delay and threadcreate are
 * cumulative; inuse_*, goroutine and any other type are gauges. */
enum pfs_merge_rule pfs_merge_rule_go(const char *type, const char *unit);
/* The rule of a type in an API's windows (Pyroscope, Coroot): inuse and
 * goroutine types are gauges, the rest deltas (sum). */
enum pfs_merge_rule pfs_merge_rule_window(const char *type, const char *unit);

struct pfs_merge_rules {
	bool windows; /* inputs are API windows: no type is cumulative */
	/* the rule of each sample type (NULL: pfs_merge_rule_window or _go) */
	enum pfs_merge_rule (*rule)(void *arg, const char *type, const char *unit);
	void *arg;
};

/* One snapshot to merge. */
struct pfs_merge_in {
	const uint8_t *gz;
	size_t len;
	size_t series;    /* the target (or API type) it is a snapshot of */
	time_t t;         /* when it was taken: the order within its series */
	bool base;        /* the series' last snapshot before the range: only
			   * the base of its first difference */
	const char *name; /* the series' name, for the comment and errors */
};
/* What a merge of one snapshot in range, in[which], gave (the common
 * case: a round or two after mounting). follows: no value changed, and
 * *gz is a gzip member that is the result after that snapshot's own
 * bytes (gzip readers read the members as one file); no_samples: every
 * value was cumulative with nothing before it, and *gz holds the sample
 * types alone. Both false: *gz is the whole result, as for any range. */
struct pfs_merge_shape {
	size_t which;
	bool follows, no_samples;
};

/* Merge snapshots over a time range, each sample type by its rule: sums
 * summed; cumulative types per series as differences between consecutive
 * snapshots, stack by stack (same locations and labels), attributed to the
 * later one (a series' first snapshot, without a base, only begins it; a
 * total that goes down or a stack that shrinks is a restart, and that step
 * counts the later snapshot whole; nothing negative); gauges per series as
 * the mean of its snapshots. Series add up. time_nanos is the first
 * instant covered, duration_nanos the span; comments (go tool pprof
 * -comments) say what went in and each rule, headed by `what`. With shape
 * (may be NULL: never follows) it says what *gz is. */
int pfs_pprof_merge_range(const struct pfs_merge_in *in, size_t n, size_t max_raw,
			  const struct pfs_merge_rules *rules, const char *what,
			  struct pfs_merge_shape *shape, uint8_t **gz, size_t *gzlen, char *err,
			  size_t errlen);

#endif
