/* pprof codec: gunzip and structural validation of profile.proto. */
#include "pprof.h"

#include "mem.h"
#include "profile.pb-c.h"
#include "xalloc.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

const char *const pfs_profile_names[PFS_NPROFILES] = {
	"heap", "allocs", "goroutine", "block", "mutex", "threadcreate", "cpu",
};

int pfs_gunzip(const uint8_t *in, size_t len, size_t max_out, uint8_t **out, size_t *outlen,
	       char *err, size_t errlen)
{
	z_stream z = {0};
	size_t cap = len * 4 + 4096, n = 0, held = 0;
	uint8_t *buf = NULL;
	int zr;

	*out = NULL;
	if (len < 18 || in[0] != 0x1f || in[1] != 0x8b) {
		snprintf(err, errlen, "not gzip data (%zu bytes)", len);
		return -1;
	}
	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
		snprintf(err, errlen, "zlib init failed");
		return -1;
	}
	if (cap > max_out)
		cap = max_out;
	if (!pfs_mem_take(cap)) {
		snprintf(err, errlen, "memory budget spent (max_memory %zu bytes)", pfs_mem_max());
		inflateEnd(&z);
		return -1;
	}
	if (!(buf = malloc(cap))) { /* budgeted: checked (xalloc.h) */
		pfs_mem_give(cap);
		snprintf(err, errlen, "out of memory inflating");
		inflateEnd(&z);
		return -1;
	}
	held = cap;
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)len;
	do {
		if (n == cap) {
			if (cap >= max_out) {
				snprintf(err, errlen, "profile larger than %zu bytes uncompressed "
					 "(max_profile_raw_bytes)", max_out);
				goto fail;
			}
			size_t want = cap * 2 > max_out ? max_out : cap * 2;
			/* old and new buffer both exist while realloc copies */
			if (!pfs_mem_take(want)) {
				snprintf(err, errlen, "memory budget spent inflating (max_memory %zu bytes)",
					 pfs_mem_max());
				goto fail;
			}
			uint8_t *b = realloc(buf, want); /* budgeted: checked (xalloc.h) */
			if (!b) {
				pfs_mem_give(want);
				snprintf(err, errlen, "out of memory inflating");
				goto fail;
			}
			pfs_mem_give(held);
			held = cap = want;
			buf = b;
		}
		z.next_out = buf + n;
		z.avail_out = (uInt)(cap - n);
		zr = inflate(&z, Z_NO_FLUSH);
		n = cap - z.avail_out;
		if (zr == Z_BUF_ERROR && z.avail_in == 0) {
			snprintf(err, errlen, "gzip stream truncated");
			goto fail;
		}
		if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
			snprintf(err, errlen, "gzip: %s", z.msg ? z.msg : "corrupt data");
			goto fail;
		}
	} while (zr != Z_STREAM_END);
	if (z.avail_in != 0) {
		snprintf(err, errlen, "%u bytes after the end of the gzip stream", z.avail_in);
		goto fail;
	}
	inflateEnd(&z);
	/* the caller holds n bytes of the budget until pfs_gunzip_free() */
	if (n) {
		uint8_t *b = pfs_xrealloc(buf, n);
		buf = b ? b : buf;
	}
	pfs_mem_give(held - n);
	*out = buf;
	*outlen = n;
	return 0;
fail:
	inflateEnd(&z);
	pfs_mem_give(held);
	free(buf);
	return -1;
}

void pfs_gunzip_free(uint8_t *out, size_t outlen)
{
	free(out);
	pfs_mem_give(outlen);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The ids of a table, sorted (NULL when they are 1..n in order, as Go
 * writes them: nothing to sort or search); the first that is 0 or
 * repeated: *bad (0 if none; *zero if it is 0). */
static uint64_t *sorted_ids(size_t n, uint64_t (*id)(const void *, size_t), const void *tab,
			    uint64_t *bad, bool *zero)
{
	uint64_t *ids;
	size_t i = 0;

	*bad = 0;
	*zero = false;
	while (i < n && id(tab, i) == i + 1)
		i++;
	if (i == n)
		return NULL;
	ids = pfs_xmalloc(n * sizeof *ids);
	for (i = 0; i < n; i++)
		if (!(ids[i] = id(tab, i)))
			*zero = true;
	qsort(ids, n, sizeof *ids, cmp_u64);
	for (i = 1; i < n && !*bad; i++)
		if (ids[i] == ids[i - 1])
			*bad = ids[i];
	return ids;
}

static bool has_id(const uint64_t *ids, size_t n, uint64_t id)
{
	if (!ids)
		return id >= 1 && id <= n;
	return bsearch(&id, ids, n, sizeof *ids, cmp_u64) != NULL;
}

static uint64_t mapping_id(const void *t, size_t i)
{
	return ((Perftools__Profiles__Mapping *const *)t)[i]->id;
}

static uint64_t function_id(const void *t, size_t i)
{
	return ((Perftools__Profiles__Function *const *)t)[i]->id;
}

static uint64_t location_id(const void *t, size_t i)
{
	return ((Perftools__Profiles__Location *const *)t)[i]->id;
}

/* The sorted ids of a table of `what`s (sorted_ids), each nonzero and
 * once; -1 and why in err if not. */
static int table_ids(const char *what, size_t n, uint64_t (*id)(const void *, size_t),
		     const void *tab, uint64_t **ids, char *err, size_t errlen)
{
	uint64_t bad;
	bool zero;

	*ids = sorted_ids(n, id, tab, &bad, &zero);
	if (zero)
		snprintf(err, errlen, "profile.proto: a %s has the reserved id 0", what);
	else if (bad)
		snprintf(err, errlen, "profile.proto: multiple %ss with id %llu", what,
			 (unsigned long long)bad);
	return zero || bad ? -1 : 0;
}

/* What google/pprof's parser (profile/encode.go postDecode: every string
 * index in the table) and Profile.CheckValid (ids nonzero and unique,
 * every sample's locations and every line's function there) require, so
 * that a profile served always opens in go tool pprof. */
static int check_profile(const Perftools__Profiles__Profile *p, char *err, size_t errlen)
{
	int64_t nstr = (int64_t)p->n_string_table;
	uint64_t *mids = NULL, *fids = NULL, *lids = NULL;
	int rc = -1;
#define STR_OK(x) ((x) >= 0 && (x) < nstr)
#define FAIL(...) do { snprintf(err, errlen, "profile.proto: " __VA_ARGS__); goto out; } while (0)

	if (nstr < 1 || p->string_table[0][0] != '\0')
		FAIL("string_table[0] is not \"\"");
	if (p->n_sample_type < 1)
		FAIL("no sample_type");
	for (size_t i = 0; i < p->n_sample_type; i++)
		if (!STR_OK(p->sample_type[i]->type) || !STR_OK(p->sample_type[i]->unit))
			FAIL("sample_type[%zu] string index out of range", i);
	if (p->period_type && (!STR_OK(p->period_type->type) || !STR_OK(p->period_type->unit)))
		FAIL("period_type string index out of range");
	if (!STR_OK(p->drop_frames) || !STR_OK(p->keep_frames) || !STR_OK(p->default_sample_type))
		FAIL("drop_frames, keep_frames or default_sample_type string index out of range");
	for (size_t i = 0; i < p->n_comment; i++)
		if (!STR_OK(p->comment[i]))
			FAIL("comment %zu string index %lld out of range", i, (long long)p->comment[i]);
	if (table_ids("mapping", p->n_mapping, mapping_id, p->mapping, &mids, err, errlen))
		goto out;
	for (size_t i = 0; i < p->n_mapping; i++)
		if (!STR_OK(p->mapping[i]->filename) || !STR_OK(p->mapping[i]->build_id))
			FAIL("mapping %llu string index out of range",
			     (unsigned long long)p->mapping[i]->id);
	if (table_ids("function", p->n_function, function_id, p->function, &fids, err, errlen))
		goto out;
	for (size_t i = 0; i < p->n_function; i++) {
		const Perftools__Profiles__Function *f = p->function[i];
		if (!STR_OK(f->name) || !STR_OK(f->system_name) || !STR_OK(f->filename))
			FAIL("function %llu string index out of range", (unsigned long long)f->id);
	}
	if (table_ids("location", p->n_location, location_id, p->location, &lids, err, errlen))
		goto out;
	for (size_t i = 0; i < p->n_location; i++) {
		const Perftools__Profiles__Location *l = p->location[i];
		for (size_t j = 0; j < l->n_line; j++)
			if (l->line[j]->function_id && /* 0: no function, as pprof reads it */
			    !has_id(fids, p->n_function, l->line[j]->function_id))
				FAIL("location %llu has a line naming missing function %llu",
				     (unsigned long long)l->id, (unsigned long long)l->line[j]->function_id);
	}
	for (size_t i = 0; i < p->n_sample; i++) {
		const Perftools__Profiles__Sample *s = p->sample[i];
		if (s->n_value != p->n_sample_type)
			FAIL("sample %zu has %zu values for %zu sample types", i, s->n_value,
			     p->n_sample_type);
		for (size_t j = 0; j < s->n_location_id; j++)
			if (!has_id(lids, p->n_location, s->location_id[j]))
				FAIL("sample %zu names missing location %llu", i,
				     (unsigned long long)s->location_id[j]);
		for (size_t j = 0; j < s->n_label; j++) {
			const Perftools__Profiles__Label *lb = s->label[j];
			if (!STR_OK(lb->key) || !STR_OK(lb->str) || !STR_OK(lb->num_unit))
				FAIL("sample %zu label string index out of range", i);
		}
	}
	rc = 0;
out:
#undef FAIL
#undef STR_OK
	free(mids);
	free(fids);
	free(lids);
	return rc;
}

Perftools__Profiles__Profile *pfs_pprof_decode_raw(const uint8_t *raw, size_t len, char *err,
						  size_t errlen)
{
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(&pfs_mem_pb, len, raw);

	if (!p) {
		snprintf(err, errlen, "not a profile.proto (protobuf decode failed%s)",
			 pfs_mem_used() + len > pfs_mem_max() ? ", or memory budget spent" : "");
		return NULL;
	}
	if (check_profile(p, err, errlen)) {
		pfs_pprof_free(p);
		return NULL;
	}
	return p;
}

void pfs_pprof_free(Perftools__Profiles__Profile *p)
{
	if (p)
		perftools__profiles__profile__free_unpacked(p, &pfs_mem_pb);
}

Perftools__Profiles__Profile *pfs_pprof_decode_gz(const uint8_t *buf, size_t len, size_t max_raw,
						 char *err, size_t errlen)
{
	Perftools__Profiles__Profile *p;
	uint8_t *raw;
	size_t rawlen;

	if (pfs_gunzip(buf, len, max_raw, &raw, &rawlen, err, errlen))
		return NULL;
	p = pfs_pprof_decode_raw(raw, rawlen, err, errlen);
	pfs_gunzip_free(raw, rawlen);
	return p;
}

bool pfs_pprof_lacks_start_line(const Perftools__Profiles__Profile *p)
{
	for (size_t i = 0; i < p->n_function; i++)
		if (p->function[i]->start_line)
			return false;
	return p->n_function > 0;
}

int pfs_pprof_validate_gz(const uint8_t *buf, size_t len, size_t max_raw, bool *no_start_line,
			  char *err, size_t errlen)
{
	Perftools__Profiles__Profile *p = pfs_pprof_decode_gz(buf, len, max_raw, err, errlen);

	if (!p)
		return -1;
	if (no_start_line)
		*no_start_line = pfs_pprof_lacks_start_line(p);
	pfs_pprof_free(p);
	return 0;
}

int pfs_gzip(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, char *err,
	     size_t errlen)
{
	z_stream z = {0};
	uLong cap;
	uint8_t *buf;
	int wbits = 9;

	/* a window no larger than the input (and tables to match): the same
	 * compression, but a small profile no longer costs 256 KiB of state
	 * (page faults each time, as malloc gives it back) */
	while (wbits < MAX_WBITS && ((size_t)1 << wbits) < len)
		wbits++;
	/* the speed Go's runtime/pprof writes its profiles at */
	if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + wbits, wbits > 14 ? 8 : wbits - 6,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		snprintf(err, errlen, "zlib init failed");
		return -1;
	}
	cap = deflateBound(&z, (uLong)len) + 32;
	buf = pfs_xmalloc(cap);
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)len;
	z.next_out = buf;
	z.avail_out = (uInt)cap;
	if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
		deflateEnd(&z);
		free(buf);
		snprintf(err, errlen, "gzip failed");
		return -1;
	}
	*outlen = z.total_out;
	*out = buf;
	deflateEnd(&z);
	return 0;
}
