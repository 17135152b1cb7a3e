/* Profile builder with deduplicating tables, and merge of several profiles. */
#include "merge.h"

#include "names.h"
#include "pprof.h"
#include "profile.pb-c.h"
#include "xalloc.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef Perftools__Profiles__Profile Profile;

/* a + b as Go's int64 does it (pprof's merge sums in Go): wrapping, not
 * C's undefined signed overflow. */
static int64_t wrap_add(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* ---- a byte-string -> id hash table ---- */

struct hent {
	uint64_t hash;
	uint8_t *key;
	size_t klen;
	uint64_t val;
};

struct htab {
	struct hent *e;
	size_t cap, n;
};

static uint64_t fnv(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ULL;
	return h;
}

static void ht_grow(struct htab *t)
{
	size_t cap = t->cap ? t->cap * 2 : 64;
	struct hent *e = pfs_xcalloc(cap, sizeof *e);

	for (size_t i = 0; i < t->cap; i++) {
		if (!t->e[i].key)
			continue;
		size_t j = t->e[i].hash & (cap - 1);
		while (e[j].key)
			j = (j + 1) & (cap - 1);
		e[j] = t->e[i];
	}
	free(t->e);
	t->e = e;
	t->cap = cap;
}

/* The value stored for key, or 0 (ids and indices here start at 1). */
static struct hent *ht_find(struct htab *t, const void *key, size_t klen, uint64_t *hash)
{
	*hash = fnv(key, klen);
	if (t->n * 2 >= t->cap)
		ht_grow(t);
	size_t j = *hash & (t->cap - 1);
	while (t->e[j].key) {
		if (t->e[j].hash == *hash && t->e[j].klen == klen && memcmp(t->e[j].key, key, klen) == 0)
			return &t->e[j];
		j = (j + 1) & (t->cap - 1);
	}
	return &t->e[j]; /* empty slot */
}

static void ht_set(struct htab *t, struct hent *slot, uint64_t hash, const void *key,
		   size_t klen, uint64_t val)
{
	slot->hash = hash;
	slot->key = pfs_xmalloc(klen ? klen : 1);
	memcpy(slot->key, key, klen);
	slot->klen = klen;
	slot->val = val;
	t->n++;
}

static void ht_free(struct htab *t)
{
	for (size_t i = 0; i < t->cap; i++)
		free(t->e[i].key);
	free(t->e);
}

/* ---- key buffers ---- */

struct kbuf {
	uint8_t *p;
	size_t n, cap;
};

static void kb_put(struct kbuf *k, const void *v, size_t n)
{
	if (n == 0)
		return; /* v may be NULL then */
	if (k->n + n > k->cap) {
		k->cap = (k->n + n) * 2 + 64;
		k->p = pfs_xrealloc(k->p, k->cap);
	}
	memcpy(k->p + k->n, v, n);
	k->n += n;
}

static void kb_u64(struct kbuf *k, uint64_t v) { kb_put(k, &v, sizeof v); }

/* ---- growable pointer arrays ---- */

#define PUSH(arr, n, cap, item)                                                  \
	do {                                                                     \
		if ((n) == (cap)) {                                              \
			(cap) = (cap) ? (cap) * 2 : 64;                          \
			(arr) = pfs_xrealloc((arr), (cap) * sizeof *(arr));           \
		}                                                                \
		(arr)[(n)++] = (item);                                           \
	} while (0)

struct pfs_pb {
	Profile *p;
	size_t cap_str, cap_fn, cap_map, cap_loc, cap_sample;
	struct htab strs, fns, maps, locs, samples;
	struct kbuf key;
};

struct pfs_pb *pfs_pb_new(void)
{
	struct pfs_pb *b = pfs_xcalloc(1, sizeof *b);

	b->p = pfs_xmalloc(sizeof *b->p);
	perftools__profiles__profile__init(b->p);
	pfs_pb_str(b, "");
	return b;
}

void pfs_pb_free(struct pfs_pb *b)
{
	if (!b)
		return;
	perftools__profiles__profile__free_unpacked(b->p, NULL);
	ht_free(&b->strs);
	ht_free(&b->fns);
	ht_free(&b->maps);
	ht_free(&b->locs);
	ht_free(&b->samples);
	free(b->key.p);
	free(b);
}

int64_t pfs_pb_str(struct pfs_pb *b, const char *s)
{
	size_t n = strlen(s);
	uint64_t h;
	struct hent *e = ht_find(&b->strs, s, n, &h);

	if (e->key)
		return (int64_t)e->val;
	ht_set(&b->strs, e, h, s, n, b->p->n_string_table);
	PUSH(b->p->string_table, b->p->n_string_table, b->cap_str, pfs_xstrdup(s));
	return (int64_t)(b->p->n_string_table - 1);
}

static Perftools__Profiles__ValueType *value_type(struct pfs_pb *b, const char *t, const char *u)
{
	Perftools__Profiles__ValueType *vt = pfs_xmalloc(sizeof *vt);
	perftools__profiles__value_type__init(vt);
	vt->type = pfs_pb_str(b, t);
	vt->unit = pfs_pb_str(b, u);
	return vt;
}

void pfs_pb_set_types(struct pfs_pb *b, const char *const *types, const char *const *units,
		      size_t n, const char *period_type, const char *period_unit)
{
	b->p->sample_type = pfs_xcalloc(n ? n : 1, sizeof *b->p->sample_type);
	for (size_t i = 0; i < n; i++)
		b->p->sample_type[b->p->n_sample_type++] = value_type(b, types[i], units[i]);
	if (period_type)
		b->p->period_type = value_type(b, period_type, period_unit);
}

void pfs_pb_set_meta(struct pfs_pb *b, int64_t time_nanos, int64_t duration_nanos, int64_t period)
{
	b->p->time_nanos = time_nanos;
	b->p->duration_nanos = duration_nanos;
	b->p->period = period;
}

uint64_t pfs_pb_function(struct pfs_pb *b, int64_t name, int64_t system_name, int64_t filename,
			 int64_t start_line)
{
	struct hent *e;
	uint64_t h;

	b->key.n = 0;
	kb_u64(&b->key, (uint64_t)name);
	kb_u64(&b->key, (uint64_t)system_name);
	kb_u64(&b->key, (uint64_t)filename);
	kb_u64(&b->key, (uint64_t)start_line);
	e = ht_find(&b->fns, b->key.p, b->key.n, &h);
	if (e->key)
		return e->val;
	Perftools__Profiles__Function *f = pfs_xmalloc(sizeof *f);
	perftools__profiles__function__init(f);
	f->id = b->p->n_function + 1;
	f->name = name;
	f->system_name = system_name;
	f->filename = filename;
	f->start_line = start_line;
	ht_set(&b->fns, e, h, b->key.p, b->key.n, f->id);
	PUSH(b->p->function, b->p->n_function, b->cap_fn, f);
	return f->id;
}

uint64_t pfs_pb_mapping(struct pfs_pb *b, uint64_t start, uint64_t limit, uint64_t offset,
			int64_t filename, int64_t build_id, unsigned has_flags)
{
	struct hent *e;
	uint64_t h;

	b->key.n = 0;
	kb_u64(&b->key, start);
	kb_u64(&b->key, limit);
	kb_u64(&b->key, offset);
	kb_u64(&b->key, (uint64_t)filename);
	kb_u64(&b->key, (uint64_t)build_id);
	kb_u64(&b->key, has_flags);
	e = ht_find(&b->maps, b->key.p, b->key.n, &h);
	if (e->key)
		return e->val;
	Perftools__Profiles__Mapping *m = pfs_xmalloc(sizeof *m);
	perftools__profiles__mapping__init(m);
	m->id = b->p->n_mapping + 1;
	m->memory_start = start;
	m->memory_limit = limit;
	m->file_offset = offset;
	m->filename = filename;
	m->build_id = build_id;
	m->has_functions = !!(has_flags & 1);
	m->has_filenames = !!(has_flags & 2);
	m->has_line_numbers = !!(has_flags & 4);
	m->has_inline_frames = !!(has_flags & 8);
	ht_set(&b->maps, e, h, b->key.p, b->key.n, m->id);
	PUSH(b->p->mapping, b->p->n_mapping, b->cap_map, m);
	return m->id;
}

uint64_t pfs_pb_location(struct pfs_pb *b, uint64_t mapping_id, uint64_t address,
			 const struct pfs_pb_line *lines, size_t n_lines, int is_folded)
{
	struct hent *e;
	uint64_t h;

	b->key.n = 0;
	kb_u64(&b->key, mapping_id);
	kb_u64(&b->key, address);
	kb_u64(&b->key, (uint64_t)is_folded);
	for (size_t i = 0; i < n_lines; i++) {
		kb_u64(&b->key, lines[i].function_id);
		kb_u64(&b->key, (uint64_t)lines[i].line);
	}
	e = ht_find(&b->locs, b->key.p, b->key.n, &h);
	if (e->key)
		return e->val;
	Perftools__Profiles__Location *l = pfs_xmalloc(sizeof *l);
	perftools__profiles__location__init(l);
	l->id = b->p->n_location + 1;
	l->mapping_id = mapping_id;
	l->address = address;
	l->is_folded = is_folded;
	l->line = pfs_xcalloc(n_lines ? n_lines : 1, sizeof *l->line);
	for (size_t i = 0; i < n_lines; i++) {
		Perftools__Profiles__Line *ln = pfs_xmalloc(sizeof *ln);
		perftools__profiles__line__init(ln);
		ln->function_id = lines[i].function_id;
		ln->line = lines[i].line;
		l->line[l->n_line++] = ln;
	}
	ht_set(&b->locs, e, h, b->key.p, b->key.n, l->id);
	PUSH(b->p->location, b->p->n_location, b->cap_loc, l);
	return l->id;
}

/* A sample's identity in b: its locations and labels (b's ids), as bytes. */
static void sample_key(struct kbuf *k, const uint64_t *locs, size_t n_locs,
		       const struct pfs_pb_label *labels, size_t n_labels)
{
	k->n = 0;
	kb_u64(k, n_locs);
	kb_put(k, locs, n_locs * sizeof *locs);
	kb_put(k, labels, n_labels * sizeof *labels);
}

/* Add values to the sample whose identity is key (sample_key's bytes). */
static void sample_add_keyed(struct pfs_pb *b, const uint8_t *key, size_t klen,
			     const int64_t *values)
{
	size_t nv = b->p->n_sample_type, n_locs, n_labels;
	struct hent *e;
	uint64_t h, n;
	bool zero = true;

	for (size_t i = 0; i < nv; i++)
		zero = zero && values[i] == 0;
	if (zero)
		return; /* pprof's merge drops all-zero samples too */
	e = ht_find(&b->samples, key, klen, &h);
	if (e->key) {
		Perftools__Profiles__Sample *s = b->p->sample[e->val];
		for (size_t i = 0; i < nv; i++)
			s->value[i] = wrap_add(s->value[i], values[i]);
		return;
	}
	memcpy(&n, key, sizeof n);
	n_locs = (size_t)n;
	n_labels = (klen - sizeof n - n_locs * sizeof(uint64_t)) / sizeof(struct pfs_pb_label);
	Perftools__Profiles__Sample *s = pfs_xmalloc(sizeof *s);
	perftools__profiles__sample__init(s);
	s->location_id = pfs_xmalloc((n_locs ? n_locs : 1) * sizeof *s->location_id);
	if (n_locs)
		memcpy(s->location_id, key + sizeof n, n_locs * sizeof *s->location_id);
	s->n_location_id = n_locs;
	s->value = pfs_xmalloc((nv ? nv : 1) * sizeof *values);
	memcpy(s->value, values, nv * sizeof *values);
	s->n_value = nv;
	s->label = pfs_xcalloc(n_labels ? n_labels : 1, sizeof *s->label);
	for (size_t i = 0; i < n_labels; i++) {
		struct pfs_pb_label pl;
		memcpy(&pl, key + sizeof n + n_locs * sizeof(uint64_t) + i * sizeof pl, sizeof pl);
		Perftools__Profiles__Label *l = pfs_xmalloc(sizeof *l);
		perftools__profiles__label__init(l);
		l->key = pl.key;
		l->str = pl.str;
		l->num = pl.num;
		l->num_unit = pl.num_unit;
		s->label[s->n_label++] = l;
	}
	ht_set(&b->samples, e, h, key, klen, b->p->n_sample);
	PUSH(b->p->sample, b->p->n_sample, b->cap_sample, s);
}

void pfs_pb_sample(struct pfs_pb *b, const uint64_t *locs, size_t n_locs, const int64_t *values,
		   const struct pfs_pb_label *labels, size_t n_labels)
{
	sample_key(&b->key, locs, n_locs, labels, n_labels);
	sample_add_keyed(b, b->key.p, b->key.n, values);
}

int pfs_pb_finish(struct pfs_pb *b, uint8_t **gz, size_t *gzlen, char *err, size_t errlen)
{
	size_t n = perftools__profiles__profile__get_packed_size(b->p);
	uint8_t *raw = pfs_xmalloc(n ? n : 1);
	int rc;

	perftools__profiles__profile__pack(b->p, raw);
	pfs_pb_free(b);
	rc = pfs_gzip(raw, n, gz, gzlen, err, errlen);
	free(raw);
	return rc;
}

/* ---- merge ---- */

static const char *str_at(const Profile *p, int64_t i)
{
	return i >= 0 && (size_t)i < p->n_string_table ? p->string_table[i] : "";
}

static void describe_types(const Profile *p, char *out, size_t outlen)
{
	size_t o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < p->n_sample_type && o < outlen; i++)
		o += (size_t)snprintf(out + o, outlen - o, "%s%s/%s", i ? "," : "",
				      str_at(p, p->sample_type[i]->type), str_at(p, p->sample_type[i]->unit));
}

static int compatible(const Profile *a, const Profile *b, size_t ib, char *err, size_t errlen)
{
	char ta[256], tb[256];
	bool ok = a->n_sample_type == b->n_sample_type;

	for (size_t i = 0; ok && i < a->n_sample_type; i++)
		ok = strcmp(str_at(a, a->sample_type[i]->type), str_at(b, b->sample_type[i]->type)) == 0 &&
		     strcmp(str_at(a, a->sample_type[i]->unit), str_at(b, b->sample_type[i]->unit)) == 0;
	if (!ok) {
		describe_types(a, ta, sizeof ta);
		describe_types(b, tb, sizeof tb);
		snprintf(err, errlen, "mismatched sample types: profile 1 has [%s], profile %zu has [%s]",
			 ta, ib + 1, tb);
		return -1;
	}
	const Perftools__Profiles__ValueType *pa = a->period_type, *pb = b->period_type;
	if (strcmp(pa ? str_at(a, pa->type) : "", pb ? str_at(b, pb->type) : "") ||
	    strcmp(pa ? str_at(a, pa->unit) : "", pb ? str_at(b, pb->unit) : "")) {
		snprintf(err, errlen, "mismatched period types: profile 1 has %s/%s, profile %zu has %s/%s",
			 pa ? str_at(a, pa->type) : "", pa ? str_at(a, pa->unit) : "", ib + 1,
			 pb ? str_at(b, pb->type) : "", pb ? str_at(b, pb->unit) : "");
		return -1;
	}
	return 0;
}

/* Where an id of src sits in its array: ids are usually 1..n in order;
 * otherwise a sorted copy is searched (no scan per lookup). */
struct idx {
	const uint64_t *ids;
	size_t n;
	uint64_t (*sorted)[2]; /* id, position + 1; NULL when ids are 1..n */
};

static int cmp_pair(const void *a, const void *b)
{
	uint64_t x = (*(const uint64_t(*)[2])a)[0], y = (*(const uint64_t(*)[2])b)[0];
	return x < y ? -1 : x > y;
}

static void idx_init(struct idx *x, const uint64_t *ids, size_t n)
{
	bool dense = true;

	x->ids = ids;
	x->n = n;
	x->sorted = NULL;
	for (size_t i = 0; i < n && dense; i++)
		dense = ids[i] == i + 1;
	if (dense || n == 0)
		return;
	x->sorted = pfs_xmalloc(n * sizeof *x->sorted);
	for (size_t i = 0; i < n; i++) {
		x->sorted[i][0] = ids[i];
		x->sorted[i][1] = i + 1;
	}
	qsort(x->sorted, n, sizeof *x->sorted, cmp_pair);
}

/* Position + 1 of id, or 0. */
static size_t index_of(const struct idx *x, uint64_t id)
{
	if (!x->sorted)
		return id >= 1 && id <= x->n ? id : 0;
	size_t lo = 0, hi = x->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->sorted[mid][0] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < x->n && x->sorted[lo][0] == id ? (size_t)x->sorted[lo][1] : 0;
}

/* One source profile being copied into a builder. Like pprof's merge,
 * mappings, locations and functions are added when a sample first reaches
 * them (unused ones are dropped), the source's first mapping first. */
struct src_map {
	const Profile *src;
	struct pfs_pb *b;
	uint64_t *fid, *fnew, *mid, *mnew, *lid, *lnew; /* src ids; new ids (0: not yet) */
	uint64_t *vnew; /* new ids of locations as a PGO leaf (aggregate_callees) */
	struct idx fx, mx, lx;
	struct pfs_pb_line *lines;
	size_t cap_lines;
	char *err;
	size_t errlen;
};

#define SRC_STR(m, i) pfs_pb_str((m)->b, str_at((m)->src, (i)))

static uint64_t map_mapping(struct src_map *m, size_t i)
{
	const Perftools__Profiles__Mapping *mp = m->src->mapping[i];

	if (!m->mnew[i])
		m->mnew[i] = pfs_pb_mapping(m->b, mp->memory_start, mp->memory_limit, mp->file_offset,
					    SRC_STR(m, mp->filename), SRC_STR(m, mp->build_id),
					    (mp->has_functions ? 1u : 0) | (mp->has_filenames ? 2u : 0) |
					    (mp->has_line_numbers ? 4u : 0) |
					    (mp->has_inline_frames ? 8u : 0));
	return m->mnew[i];
}

static uint64_t map_function(struct src_map *m, size_t i)
{
	const Perftools__Profiles__Function *f = m->src->function[i];

	if (!m->fnew[i])
		m->fnew[i] = pfs_pb_function(m->b, SRC_STR(m, f->name), SRC_STR(m, f->system_name),
					     SRC_STR(m, f->filename), f->start_line);
	return m->fnew[i];
}

/* New id of src location i, or 0 with m->err set. As a leaf whose callees
 * are aggregated: its innermost line's number and its address are dropped
 * (when it has lines), so the samples of one callee fold together. */
static uint64_t map_location(struct src_map *m, size_t i, bool leaf)
{
	const Perftools__Profiles__Location *l = m->src->location[i];
	uint64_t mapping = 0, *id = leaf ? &m->vnew[i] : &m->lnew[i];

	if (*id)
		return *id;
	if (l->mapping_id) { /* one that is not there: none, as pprof reads it */
		size_t mi = index_of(&m->mx, l->mapping_id);
		if (mi)
			mapping = map_mapping(m, mi - 1);
	}
	if (l->n_line > m->cap_lines) {
		m->cap_lines = l->n_line * 2;
		m->lines = pfs_xrealloc(m->lines, m->cap_lines * sizeof *m->lines);
	}
	for (size_t j = 0; j < l->n_line; j++) {
		uint64_t want = l->line[j]->function_id;
		size_t fi = want ? index_of(&m->fx, want) : 0;
		if (want && !fi) {
			snprintf(m->err, m->errlen, "location %llu names missing function %llu",
				 (unsigned long long)l->id, (unsigned long long)want);
			return 0;
		}
		m->lines[j].function_id = fi ? map_function(m, fi - 1) : 0;
		m->lines[j].line = l->line[j]->line;
	}
	leaf = leaf && l->n_line;
	if (leaf)
		m->lines[0].line = 0;
	*id = pfs_pb_location(m->b, mapping, leaf ? 0 : l->address, m->lines, l->n_line,
			      l->is_folded);
	return *id;
}

/* Where add_profile puts each sample once mapped into b's ids (NULL:
 * pfs_pb_sample, the merge's sum). */
struct sink {
	void (*fn)(struct sink *k, struct pfs_pb *b, const uint64_t *locs, size_t n_locs,
		   const int64_t *values, const struct pfs_pb_label *labels, size_t n_labels);
};

/* Copy every sample of src into b, remapping ids and string indices,
 * shaped as o says. */
static int add_profile(struct pfs_pb *b, const Profile *src, const struct pfs_merge_opts *o,
		       struct sink *sink, char *err, size_t errlen)
{
	size_t nf = src->n_function, nm = src->n_mapping, nl = src->n_location;
	struct src_map m = {
		.src = src, .b = b, .err = err, .errlen = errlen,
		.fid = pfs_xcalloc(nf + 1, sizeof(uint64_t)), .fnew = pfs_xcalloc(nf + 1, sizeof(uint64_t)),
		.mid = pfs_xcalloc(nm + 1, sizeof(uint64_t)), .mnew = pfs_xcalloc(nm + 1, sizeof(uint64_t)),
		.lid = pfs_xcalloc(nl + 1, sizeof(uint64_t)), .lnew = pfs_xcalloc(nl + 1, sizeof(uint64_t)),
		.vnew = pfs_xcalloc(nl + 1, sizeof(uint64_t)),
	};
	uint64_t *locs = NULL;
	struct pfs_pb_label *labels = NULL;
	size_t cap_locs = 0, cap_labels = 0;
	int rc = -1;

	for (size_t i = 0; i < nf; i++)
		m.fid[i] = src->function[i]->id;
	for (size_t i = 0; i < nm; i++)
		m.mid[i] = src->mapping[i]->id;
	for (size_t i = 0; i < nl; i++)
		m.lid[i] = src->location[i]->id;
	idx_init(&m.fx, m.fid, nf);
	idx_init(&m.mx, m.mid, nm);
	idx_init(&m.lx, m.lid, nl);
	if (nm)
		map_mapping(&m, 0); /* the main binary stays first */
	for (size_t i = 0; i < src->n_sample; i++) {
		const Perftools__Profiles__Sample *s = src->sample[i];
		bool zero = true;
		for (size_t j = 0; j < s->n_value; j++)
			zero = zero && s->value[j] == 0;
		/* `go tool pprof -proto` output has neither all-zero samples nor
		 * samples without a stack (Go's goroutine profile has some). */
		if (zero || s->n_location_id == 0)
			continue;
		size_t n_locs = s->n_location_id, n_labels = o->drop_labels ? 0 : s->n_label;
		if (o->keep_locations && n_locs > o->keep_locations)
			n_locs = o->keep_locations; /* the leaf end: location_id[0] is the leaf */
		if (n_locs > cap_locs) {
			cap_locs = n_locs * 2;
			locs = pfs_xrealloc(locs, cap_locs * sizeof *locs);
		}
		for (size_t j = 0; j < n_locs; j++) {
			size_t li = index_of(&m.lx, s->location_id[j]);
			if (!li) {
				snprintf(err, errlen, "sample %zu names missing location %llu", i,
					 (unsigned long long)s->location_id[j]);
				goto out;
			}
			if (!(locs[j] = map_location(&m, li - 1, j == 0 && o->aggregate_callees)))
				goto out;
		}
		if (n_labels > cap_labels) {
			cap_labels = n_labels * 2;
			labels = pfs_xrealloc(labels, cap_labels * sizeof *labels);
		}
		for (size_t j = 0; j < n_labels; j++) {
			const Perftools__Profiles__Label *l = s->label[j];
			labels[j] = (struct pfs_pb_label){SRC_STR(&m, l->key), l->str ? SRC_STR(&m, l->str) : 0,
							  l->num, l->num_unit ? SRC_STR(&m, l->num_unit) : 0};
		}
		if (sink)
			sink->fn(sink, b, locs, n_locs, s->value, labels, n_labels);
		else
			pfs_pb_sample(b, locs, n_locs, s->value, labels, n_labels);
	}
	rc = 0;
out:
	free(m.fid), free(m.fnew), free(m.mid), free(m.mnew), free(m.lid), free(m.lnew);
	free(m.vnew);
	free(m.fx.sorted), free(m.mx.sorted), free(m.lx.sorted);
	free(m.lines), free(locs), free(labels);
	return rc;
}

/* A builder with p0's sample types, period type, frame filters and
 * default sample type. */
static struct pfs_pb *builder_like(const Profile *p0)
{
	struct pfs_pb *b = pfs_pb_new();
	const char *types[64], *units[64];
	size_t nt = p0->n_sample_type < 64 ? p0->n_sample_type : 64;

	for (size_t i = 0; i < nt; i++) {
		types[i] = str_at(p0, p0->sample_type[i]->type);
		units[i] = str_at(p0, p0->sample_type[i]->unit);
	}
	pfs_pb_set_types(b, types, units, nt,
			 p0->period_type ? str_at(p0, p0->period_type->type) : NULL,
			 p0->period_type ? str_at(p0, p0->period_type->unit) : NULL);
	if (p0->drop_frames)
		b->p->drop_frames = pfs_pb_str(b, str_at(p0, p0->drop_frames));
	if (p0->keep_frames)
		b->p->keep_frames = pfs_pb_str(b, str_at(p0, p0->keep_frames));
	if (p0->default_sample_type)
		b->p->default_sample_type = pfs_pb_str(b, str_at(p0, p0->default_sample_type));
	return b;
}

int pfs_pprof_merge(const uint8_t *const *in, const size_t *inlen, size_t n, size_t max_raw,
		    uint8_t **gz, size_t *gzlen, char *err, size_t errlen)
{
	const struct pfs_merge_opts plain = {0};

	return pfs_pprof_merge_ex(in, inlen, n, max_raw, &plain, gz, gzlen, err, errlen);
}

int pfs_pprof_pgo(const uint8_t *const *in, const size_t *inlen, size_t n, size_t max_raw,
		  size_t *used, uint8_t **gz, size_t *gzlen, char *err, size_t errlen)
{
	const struct pfs_merge_opts pgo = {.keep_locations = PFS_PGO_KEEP_LOCATIONS,
					   .aggregate_callees = true,
					   .drop_labels = true,
					   .need_start_line = true,
					   .used = used};

	return pfs_pprof_merge_ex(in, inlen, n, max_raw, &pgo, gz, gzlen, err, errlen);
}

int pfs_pprof_merge_ex(const uint8_t *const *in, const size_t *inlen, size_t n, size_t max_raw,
		       const struct pfs_merge_opts *o, uint8_t **gz, size_t *gzlen, char *err,
		       size_t errlen)
{
	Profile **ps = pfs_xcalloc(n ? n : 1, sizeof *ps);
	struct pfs_pb *b = NULL;
	size_t kept = 0, first = 0;
	int rc = -1;

	if (o->used)
		*o->used = 0;
	if (n == 0) {
		snprintf(err, errlen, "nothing to merge");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char why[256];
		if (!(ps[i] = pfs_pprof_decode_gz(in[i], inlen[i], max_raw, why, sizeof why))) {
			snprintf(err, errlen, "profile %zu: %s", i + 1, why);
			goto out;
		}
		if (o->need_start_line && pfs_pprof_lacks_start_line(ps[i])) {
			pfs_pprof_free(ps[i]); /* left out */
			ps[i] = NULL;
			continue;
		}
		if (kept++ == 0)
			first = i;
		else if (compatible(ps[first], ps[i], i, err, errlen))
			goto out;
	}
	if (o->used)
		*o->used = kept;
	if (kept == 0) {
		snprintf(err, errlen, "none of the %zu profiles has Function.start_line", n);
		rc = PFS_MERGE_NOTHING;
		goto out;
	}
	b = builder_like(ps[first]);
	{
		int64_t t = 0, d = 0, period = 0;

		for (size_t i = 0; i < n; i++) {
			if (!ps[i])
				continue;
			if (ps[i]->time_nanos && (!t || ps[i]->time_nanos < t))
				t = ps[i]->time_nanos;
			d = wrap_add(d, ps[i]->duration_nanos);
			if (ps[i]->period > period)
				period = ps[i]->period;
		}
		pfs_pb_set_meta(b, t, d, period);
	}
	for (size_t i = 0; i < n; i++)
		if (ps[i] && add_profile(b, ps[i], o, NULL, err, errlen)) {
			char why[256];
			snprintf(why, sizeof why, "%s", err);
			snprintf(err, errlen, "profile %zu: %s", i + 1, why);
			goto out;
		}
	rc = pfs_pb_finish(b, gz, gzlen, err, errlen);
	b = NULL;
out:
	pfs_pb_free(b);
	for (size_t i = 0; i < n; i++)
		pfs_pprof_free(ps[i]);
	free(ps);
	return rc;
}

/* ---- merge over time: each sample type by what its numbers mean ---- */

enum pfs_merge_rule pfs_merge_rule_go(const char *type, const char *unit)
{
	static const char *const cumulative[] = {"alloc_objects", "alloc_space", "contentions",
						 "delay", "threadcreate"};
	static const char *const gauge[] = {"inuse_objects", "inuse_space", "goroutine"};

	(void)unit;
	for (size_t i = 0; i < sizeof cumulative / sizeof *cumulative; i++)
		if (strcmp(type, cumulative[i]) == 0)
			return PFS_RULE_CUMULATIVE;
	for (size_t i = 0; i < sizeof gauge / sizeof *gauge; i++)
		if (strcmp(type, gauge[i]) == 0)
			return PFS_RULE_GAUGE;
	if (strcmp(type, "samples") == 0 || strcmp(type, "cpu") == 0)
		return PFS_RULE_SUM;
	return PFS_RULE_GAUGE; /* unknown: a mean never counts anything twice */
}

enum pfs_merge_rule pfs_merge_rule_window(const char *type, const char *unit)
{
	(void)unit;
	return strstr(type, "inuse") || strstr(type, "goroutine") ? PFS_RULE_GAUGE : PFS_RULE_SUM;
}

/* One snapshot's samples, in a series builder's ids: identity -> values. */
struct stab {
	struct sink sink; /* first: add_profile hands samples here */
	struct htab h;    /* sample key -> entry */
	int64_t *v;       /* nv values per entry */
	size_t nv, n, cap;
};

static void stab_put(struct sink *k, struct pfs_pb *b, const uint64_t *locs, size_t n_locs,
		     const int64_t *values, const struct pfs_pb_label *labels, size_t n_labels)
{
	struct stab *t = (struct stab *)k;
	struct hent *e;
	uint64_t h;

	sample_key(&b->key, locs, n_locs, labels, n_labels);
	e = ht_find(&t->h, b->key.p, b->key.n, &h);
	if (!e->key) {
		if (t->n == t->cap) {
			t->cap = t->cap ? t->cap * 2 : 64;
			t->v = pfs_xrealloc(t->v, t->cap * t->nv * sizeof *t->v);
		}
		memset(t->v + t->n * t->nv, 0, t->nv * sizeof *t->v);
		ht_set(&t->h, e, h, b->key.p, b->key.n, t->n++);
	}
	for (size_t i = 0; i < t->nv; i++) /* one stack twice in a profile: summed */
		t->v[e->val * t->nv + i] = wrap_add(t->v[e->val * t->nv + i], values[i]);
}

static void stab_free(struct stab *t)
{
	ht_free(&t->h);
	free(t->v);
	memset(t, 0, sizeof *t);
}

/* Values of key in t, or NULL. */
static const int64_t *stab_get(struct stab *t, const uint8_t *key, size_t klen)
{
	uint64_t h;
	struct hent *e;

	if (!t->h.cap)
		return NULL; /* empty (ht_find would make room) */
	e = ht_find(&t->h, key, klen, &h);
	return e->key ? t->v + e->val * t->nv : NULL;
}

/* True if a process restarted between prev and cur: a total of a
 * cumulative type went down, or one of its stacks shrank or vanished. */
static bool restarted(struct stab *prev, struct stab *cur, const enum pfs_merge_rule *rule)
{
	size_t nv = cur->nv;
	int64_t tp[64] = {0}, tc[64] = {0};

	for (size_t j = 0; j < prev->h.cap; j++) {
		const struct hent *e = &prev->h.e[j];
		if (!e->key)
			continue;
		const int64_t *p = prev->v + e->val * nv, *c = stab_get(cur, e->key, e->klen);
		for (size_t i = 0; i < nv; i++) {
			if (rule[i] != PFS_RULE_CUMULATIVE)
				continue;
			tp[i] = wrap_add(tp[i], p[i]);
			if ((c ? c[i] : 0) < p[i])
				return true;
		}
	}
	for (size_t e = 0; e < cur->n; e++)
		for (size_t i = 0; i < nv; i++)
			if (rule[i] == PFS_RULE_CUMULATIVE)
				tc[i] = wrap_add(tc[i], cur->v[e * nv + i]);
	for (size_t i = 0; i < nv; i++)
		if (rule[i] == PFS_RULE_CUMULATIVE && tc[i] < tp[i])
			return true;
	return false;
}

/* What one series (one target's snapshots) adds to the merge, into b:
 * sums, differences and the raw values of gauges. */
static void series_step(struct pfs_pb *b, struct stab *prev, struct stab *cur,
			const enum pfs_merge_rule *rule, bool has_prev, size_t *restarts)
{
	size_t nv = cur->nv;
	bool restart = has_prev && restarted(prev, cur, rule);
	int64_t v[64];

	*restarts += restart;
	for (size_t j = 0; j < cur->h.cap; j++) {
		const struct hent *e = &cur->h.e[j];
		if (!e->key)
			continue;
		const int64_t *c = cur->v + e->val * nv;
		const int64_t *p = has_prev && !restart ? stab_get(prev, e->key, e->klen) : NULL;
		for (size_t i = 0; i < nv; i++) {
			/* a total below zero is nonsense: taken as zero */
			int64_t now = c[i] > 0 ? c[i] : 0, before = p && p[i] > 0 ? p[i] : 0;
			if (rule[i] != PFS_RULE_CUMULATIVE)
				v[i] = c[i];
			else if (!has_prev)
				v[i] = 0; /* the series begins here: nothing to take a difference from */
			else
				v[i] = now > before ? now - before : 0;
		}
		sample_add_keyed(b, e->key, e->klen, v);
	}
}

/* x / n rounded to the nearest integer (halves away from zero). */
static int64_t div_round(int64_t x, int64_t n)
{
	int64_t q = x / n, r = x % n;

	if (r < 0 ? -r * 2 >= n : r * 2 >= n)
		q += r < 0 ? -1 : 1;
	return q;
}

static void fmt_time(int64_t nanos, char out[PFS_TIME_NAME_MAX])
{
	pfs_name_time((time_t)(nanos / 1000000000), out);
}

static int cmp_in(const void *a, const void *b)
{
	const struct pfs_merge_in *x = *(const struct pfs_merge_in *const *)a,
				  *y = *(const struct pfs_merge_in *const *)b;

	if (x->series != y->series)
		return x->series < y->series ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

/* The rule of a sample type; in windows a cumulative one is a sum (a
 * window holds what happened in it). */
static enum pfs_merge_rule rule_of(const struct pfs_merge_rules *rules, const char *type,
				   const char *unit)
{
	enum pfs_merge_rule r = rules->rule	 ? rules->rule(rules->arg, type, unit)
				: rules->windows ? pfs_merge_rule_window(type, unit)
						 : pfs_merge_rule_go(type, unit);

	return rules->windows && r == PFS_RULE_CUMULATIVE ? PFS_RULE_SUM : r;
}

/* The comment of a series whose first snapshot (at `at`) has none before
 * it: its differences begin there. malloc'd. */
static char *begin_line(const char *name, int64_t at)
{
	char t0[PFS_TIME_NAME_MAX], line[512];

	fmt_time(at, t0);
	snprintf(line, sizeof line, "%s: differences begin at its first snapshot, %s (none before it)",
		 name, t0);
	return pfs_xstrdup(line);
}

/* The comment lines of a merge (what went in, and each rule), at most
 * 4 + n_begins, into lines[] (each malloc'd); returns how many. p: the
 * result's types. */
static size_t comment_lines(const Profile *p, const char *what, size_t n_snaps, size_t n_series,
			    int64_t first, int64_t last, const enum pfs_merge_rule *rule,
			    bool windows, size_t restarts, char *const *begins, size_t n_begins,
			    char **lines)
{
	size_t nt = p->n_sample_type, n = 0;
	char line[1024], t0[PFS_TIME_NAME_MAX], t1[PFS_TIME_NAME_MAX];

	fmt_time(first, t0);
	fmt_time(last, t1);
	snprintf(line, sizeof line, "%s: %zu %s%s of %zu %s%s, %s to %s", what, n_snaps,
		 windows ? "window" : "snapshot", n_snaps == 1 ? "" : "s", n_series,
		 windows ? "profile type" : "target", n_series == 1 ? "" : "s", t0, t1);
	lines[n++] = pfs_xstrdup(line);
	for (int r = 0; r < 3; r++) {
		size_t o = 0;
		for (size_t i = 0; i < nt; i++)
			if (rule[i] == (enum pfs_merge_rule)r)
				o += (size_t)snprintf(line + o, o < sizeof line ? sizeof line - o : 0,
						      "%s%s", o ? ", " : "", str_at(p, p->sample_type[i]->type));
		if (o == 0 || o >= sizeof line - 300)
			continue;
		if (r == PFS_RULE_SUM)
			snprintf(line + o, sizeof line - o, ": %s, summed",
				 windows ? "work in each window" : "work in each snapshot's window");
		else if (r == PFS_RULE_CUMULATIVE)
			snprintf(line + o, sizeof line - o,
				 ": totals since each process started, so per target the differences "
				 "between consecutive snapshots, summed (%zu restart%s: the snapshot "
				 "after each counted whole)", restarts, restarts == 1 ? "" : "s");
		else
			snprintf(line + o, sizeof line - o,
				 ": values at an instant, so per target the mean of its %s, targets "
				 "summed", windows ? "windows" : "snapshots");
		lines[n++] = pfs_xstrdup(line);
	}
	for (size_t i = 0; i < n_begins; i++)
		lines[n++] = pfs_xstrdup(begins[i]);
	return n;
}

/* A merge over time under way. */
struct range_merge {
	const struct pfs_merge_in *const *order; /* by series, then time */
	size_t n, max_raw;
	Profile *p0; /* the first snapshot in range: types, and decoded once */
	size_t i0;   /* its index in order */
	enum pfs_merge_rule rule[64];
	size_t nv;
	bool any_cum, windows;
	/* what the comments say */
	size_t restarts, n_snaps, n_series, n_begins;
	char **begins;
	int64_t first, last, period;
	char why[256];
};

/* Into s, what the series order[i..end) adds: sums, differences, means. */
static int merge_series(struct range_merge *rm, size_t i, size_t end, struct pfs_pb *s,
			char *err, size_t errlen)
{
	const struct pfs_merge_opts plain = {0};
	struct stab prev = {0}, cur = {0};
	size_t n_in = 0, nv = rm->nv;
	bool has_prev = false;
	int rc = -1;

	for (size_t k = i; k < end; k++) {
		const struct pfs_merge_in *x = rm->order[k];
		if (x->base && !rm->any_cum)
			continue; /* only differences start before the range */
		Profile *p = k == rm->i0 ? rm->p0
					 : pfs_pprof_decode_gz(x->gz, x->len, rm->max_raw, rm->why,
							       sizeof rm->why);
		if (!p) {
			snprintf(err, errlen, "%s: %s", x->name, rm->why);
			goto out;
		}
		if (p != rm->p0 && compatible(rm->p0, p, 0, rm->why, sizeof rm->why)) {
			snprintf(err, errlen, "%s: %s", x->name, rm->why);
			pfs_pprof_free(p);
			goto out;
		}
		cur = (struct stab){.sink = {stab_put}, .nv = nv};
		int arc = add_profile(s, p, &plain, &cur.sink, rm->why, sizeof rm->why);
		int64_t at = p->time_nanos ? p->time_nanos : (int64_t)x->t * 1000000000;
		int64_t end_at = at + (p->duration_nanos > 0 ? p->duration_nanos : 0);
		if (p->period > rm->period)
			rm->period = p->period;
		if (p != rm->p0)
			pfs_pprof_free(p);
		if (arc) {
			snprintf(err, errlen, "%s: %s", x->name, rm->why);
			goto out;
		}
		if (at < rm->first)
			rm->first = at;
		if (!x->base) {
			n_in++;
			rm->n_snaps++;
			if (end_at > rm->last)
				rm->last = end_at;
			if (!has_prev && rm->any_cum) {
				rm->begins = pfs_xrealloc(rm->begins, (rm->n_begins + 1) * sizeof *rm->begins);
				rm->begins[rm->n_begins++] = begin_line(x->name, at);
			}
			series_step(s, &prev, &cur, rm->rule, has_prev, &rm->restarts);
		}
		stab_free(&prev);
		prev = cur;
		cur = (struct stab){0};
		has_prev = true;
	}
	if (n_in) {
		rm->n_series++;
		for (size_t j = 0; j < s->p->n_sample; j++)
			for (size_t c = 0; c < nv; c++)
				if (rm->rule[c] == PFS_RULE_GAUGE)
					s->p->sample[j]->value[c] =
						div_round(s->p->sample[j]->value[c], (int64_t)n_in);
	}
	rc = 0;
out:
	stab_free(&prev);
	stab_free(&cur);
	return rc;
}

/* ---- one snapshot, on its bytes: no decode, no encode ---- */

struct wire {
	const uint8_t *p, *end;
};

static bool wire_varint(struct wire *w, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64 && w->p < w->end; shift += 7) {
		uint8_t b = *w->p++;
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return true;
	}
	return false;
}

/* The next field: its number, wire type, and value (varint) or bytes. */
static bool wire_field(struct wire *w, uint32_t *num, int *type, uint64_t *v, struct wire *bytes)
{
	uint64_t key, len;

	if (!wire_varint(w, &key) || key >> 3 == 0 || key >> 3 > UINT32_MAX)
		return false;
	*num = (uint32_t)(key >> 3);
	*type = (int)(key & 7);
	switch (*type) {
	case 0:
		return wire_varint(w, v);
	case 1:
	case 5:
		if ((size_t)(w->end - w->p) < (*type == 1 ? 8u : 4u))
			return false;
		w->p += *type == 1 ? 8 : 4;
		return true;
	case 2:
		if (!wire_varint(w, &len) || len > (uint64_t)(w->end - w->p))
			return false;
		bytes->p = w->p;
		bytes->end = w->p + len;
		w->p += len;
		return true;
	default:
		return false;
	}
}

static void out_varint(struct kbuf *o, uint64_t v)
{
	uint8_t b[10];
	size_t n = 0;

	do {
		b[n++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
		v >>= 7;
	} while (v);
	kb_put(o, b, n);
}

static void out_bytes(struct kbuf *o, uint32_t num, const void *p, size_t len)
{
	out_varint(o, (uint64_t)num << 3 | 2);
	out_varint(o, len);
	kb_put(o, p, len);
}

/* A sample with its cumulative values zeroed; false
 * if it does not parse. *all_zero: nothing left in it. */
static bool raw_sample(struct wire smp, const enum pfs_merge_rule *rule, size_t nv, struct kbuf *o,
		       bool *all_zero)
{
	struct kbuf body = {0}, vals = {0};
	size_t col = 0;
	uint32_t num;
	int type;
	uint64_t v;
	struct wire b;
	bool ok = true;

	*all_zero = true;
	while (ok && smp.p < smp.end) {
		const uint8_t *start = smp.p;
		if (!(ok = wire_field(&smp, &num, &type, &v, &b)))
			break;
		if (num != 2) { /* locations, labels: as they are */
			kb_put(&body, start, (size_t)(smp.p - start));
			continue;
		}
		if (type != 0 && type != 2) {
			ok = false;
			break;
		}
		struct wire pk = type == 2 ? b : (struct wire){0};
		for (bool more = true; more && ok;) {
			if (type == 2) {
				if (pk.p == pk.end)
					break;
				ok = wire_varint(&pk, &v);
			} else {
				more = false;
			}
			if (ok && col < nv && rule[col] == PFS_RULE_CUMULATIVE)
				v = 0;
			*all_zero = *all_zero && v == 0;
			out_varint(&vals, v);
			col++;
		}
	}
	if (ok && col == nv) {
		out_bytes(&body, 2, vals.p, vals.n);
		out_bytes(o, 2, body.p, body.n);
	}
	free(body.p);
	free(vals.p);
	return ok && col == nv;
}

/* The merge of one snapshot in range (a fresh mount: the common case),
 * on its bytes, with no decoder and no builder: its fields copied as they
 * are, but for its samples' cumulative values (zeroed: only a snapshot
 * before it could tell what happened; a sample left all-zero dropped, as
 * a builder drops it), its time, duration and comments. Where every value
 * is cumulative none is left: its sample types alone (shape->no_samples).
 * Where none is (no cumulative type) and shape allows, only what follows
 * the snapshot's own bytes (shape->follows: a later duration_nanos wins,
 * strings and comments append; its own time_nanos stands, as pprof reads
 * a second one as two profiles concatenated). 1 if the bytes do not parse
 * as that, or if a cumulative type has a base (has_base) to take
 * differences from: the caller merges. */
static int merge_one_raw(const struct pfs_merge_in *x, bool has_base, size_t max_raw,
			 const struct pfs_merge_rules *rules, const char *what,
			 struct pfs_merge_shape *shape, uint8_t **gz, size_t *gzlen, char *err,
			 size_t errlen)
{
	uint8_t *raw;
	size_t rawlen, nstr = 0, nv = 0;
	struct wire w, b, strs[64];
	int64_t types[64], units[64], t_nanos = 0, d_nanos = 0;
	enum pfs_merge_rule rule[64];
	struct kbuf o = {0};
	uint32_t num;
	int type, rc = 1;
	uint64_t v;
	bool any_cum = false, all_cum = true;

	if (pfs_gunzip(x->gz, x->len, max_raw, &raw, &rawlen, err, errlen))
		return 1;
	/* first the sample types and the strings that name them */
	w = (struct wire){raw, raw + rawlen};
	while (w.p < w.end) {
		if (!wire_field(&w, &num, &type, &v, &b))
			goto out;
		if (num == 1 && type == 2) {
			if (nv == 64)
				goto out;
			struct wire vt = b;
			types[nv] = units[nv] = 0;
			while (vt.p < vt.end) {
				uint32_t n2;
				int t2;
				uint64_t v2;
				struct wire b2;
				if (!wire_field(&vt, &n2, &t2, &v2, &b2))
					goto out;
				if (n2 == 1 && t2 == 0)
					types[nv] = (int64_t)v2;
				else if (n2 == 2 && t2 == 0)
					units[nv] = (int64_t)v2;
			}
			nv++;
		} else if (num == 6 && type == 2) {
			if (nstr < 64)
				strs[nstr] = b;
			nstr++;
		} else if (num == 9 && type == 0) {
			t_nanos = (int64_t)v;
		} else if (num == 10 && type == 0) {
			d_nanos = (int64_t)v;
		}
	}
	if (nv == 0)
		goto out;
	char *tstr[64] = {0};
	for (size_t i = 0; i < nv; i++) {
		char unit[128];
		if (types[i] < 0 || types[i] >= (int64_t)nstr || types[i] >= 64 || units[i] < 0 ||
		    units[i] >= (int64_t)nstr || units[i] >= 64)
			goto names_out; /* a name past the first 64 strings: decode instead */
		tstr[i] = pfs_xstrndup((const char *)strs[types[i]].p,
				  (size_t)(strs[types[i]].end - strs[types[i]].p));
		snprintf(unit, sizeof unit, "%.*s", (int)(strs[units[i]].end - strs[units[i]].p),
			 (const char *)strs[units[i]].p);
		rule[i] = rule_of(rules, tstr[i], unit);
		any_cum = any_cum || rule[i] == PFS_RULE_CUMULATIVE;
		all_cum = all_cum && rule[i] == PFS_RULE_CUMULATIVE;
	}
	if (any_cum && has_base)
		goto names_out;
	bool follows = shape && !any_cum, none_left = all_cum;
	/* then the copy (none where it follows the snapshot's bytes) */
	w = (struct wire){raw, follows ? raw : raw + rawlen};
	while (w.p < w.end) {
		const uint8_t *start = w.p;
		bool zero;
		if (!wire_field(&w, &num, &type, &v, &b))
			goto names_out;
		if (none_left) { /* the types and their strings */
			if (num == 1 || num == 6 || num == 7 || num == 8 || num == 11 || num == 12 ||
			    num == 14)
				kb_put(&o, start, (size_t)(w.p - start));
		} else if (num == 2 && type == 2) {
			size_t before = o.n;
			if (!raw_sample(b, rule, nv, &o, &zero))
				goto names_out;
			if (zero)
				o.n = before; /* as a builder drops it */
		} else if (num != 9 && num != 10 && num != 13) {
			kb_put(&o, start, (size_t)(w.p - start));
		}
	}
	/* what it holds: its time, its span, the comments */
	int64_t at = t_nanos ? t_nanos : (int64_t)x->t * 1000000000;
	int64_t end_at = at + (d_nanos > 0 ? d_nanos : 0);
	char *lines[5], *begin = begin_line(x->name, at);
	Profile names = PERFTOOLS__PROFILES__PROFILE__INIT;
	Perftools__Profiles__ValueType vts[64], *vtp[64];
	for (size_t i = 0; i < nv; i++) { /* comment_lines reads the type names */
		perftools__profiles__value_type__init(&vts[i]);
		vts[i].type = (int64_t)i;
		vtp[i] = &vts[i];
	}
	names.sample_type = vtp;
	names.n_sample_type = nv;
	names.string_table = tstr;
	names.n_string_table = nv;
	size_t nl = comment_lines(&names, what, 1, 1, at, end_at, rule, rules->windows, 0, &begin,
				  any_cum ? 1 : 0, lines);
	free(begin);
	struct kbuf cm = {0};
	for (size_t i = 0; i < nl; i++) {
		out_bytes(&o, 6, lines[i], strlen(lines[i]));
		out_varint(&cm, nstr + i);
		free(lines[i]);
	}
	out_bytes(&o, 13, cm.p, cm.n);
	free(cm.p);
	if (!follows || !t_nanos) {
		out_varint(&o, 9 << 3);
		out_varint(&o, (uint64_t)at);
	}
	if (!follows || d_nanos <= 0) {
		out_varint(&o, 10 << 3);
		out_varint(&o, (uint64_t)(end_at - at));
	}
	rc = pfs_gzip(o.p, o.n, gz, gzlen, err, errlen) ? -1 : 0;
	if (shape) {
		shape->follows = follows;
		shape->no_samples = none_left;
	}
names_out:
	for (size_t i = 0; i < nv; i++)
		free(tstr[i]);
out:
	pfs_gunzip_free(raw, rawlen);
	free(o.p);
	return rc;
}

int pfs_pprof_merge_range(const struct pfs_merge_in *in, size_t n, size_t max_raw,
			  const struct pfs_merge_rules *rules, const char *what,
			  struct pfs_merge_shape *shape, uint8_t **gz, size_t *gzlen, char *err,
			  size_t errlen)
{
	const struct pfs_merge_in **order = pfs_xcalloc(n ? n : 1, sizeof *order);
	const struct pfs_merge_opts plain = {0};
	struct range_merge rm = {.order = order, .n = n, .max_raw = max_raw,
				 .windows = rules->windows, .first = INT64_MAX, .last = INT64_MIN};
	struct pfs_pb *g = NULL;
	int rc = -1;

	for (size_t i = 0; i < n; i++)
		order[i] = &in[i];
	qsort(order, n, sizeof *order, cmp_in);
	for (rm.i0 = 0; rm.i0 < n && order[rm.i0]->base; rm.i0++)
		;
	if (rm.i0 == n) {
		snprintf(err, errlen, "nothing to merge");
		goto out;
	}
	if (shape)
		*shape = (struct pfs_merge_shape){.which = (size_t)(order[rm.i0] - in)};
	/* one snapshot in range: on its bytes */
	if (rm.i0 == n - 1 && (rc = merge_one_raw(order[rm.i0], n > 1, max_raw, rules, what, shape,
						  gz, gzlen, err, errlen)) <= 0)
		goto out;
	rc = -1;
	if (!(rm.p0 = pfs_pprof_decode_gz(order[rm.i0]->gz, order[rm.i0]->len, max_raw, rm.why,
					  sizeof rm.why))) {
		snprintf(err, errlen, "%s: %s", order[rm.i0]->name, rm.why);
		goto out;
	}
	rm.nv = rm.p0->n_sample_type < 64 ? rm.p0->n_sample_type : 64;
	for (size_t i = 0; i < rm.nv; i++) {
		rm.rule[i] = rule_of(rules, str_at(rm.p0, rm.p0->sample_type[i]->type),
				     str_at(rm.p0, rm.p0->sample_type[i]->unit));
		rm.any_cum = rm.any_cum || rm.rule[i] == PFS_RULE_CUMULATIVE;
	}
	g = builder_like(rm.p0);
	/* one series (one target): built in g itself; more: each in a builder
	 * of its own (differences and means are per series), then added up */
	bool one = order[0]->series == order[n - 1]->series;
	for (size_t i = 0, end; i < n; i = end) {
		for (end = i; end < n && order[end]->series == order[i]->series; end++)
			;
		struct pfs_pb *s = one ? g : builder_like(rm.p0);
		int src = merge_series(&rm, i, end, s, err, errlen);
		if (!src && !one && add_profile(g, s->p, &plain, NULL, rm.why, sizeof rm.why)) {
			snprintf(err, errlen, "%s", rm.why);
			src = -1;
		}
		if (!one)
			pfs_pb_free(s);
		if (src)
			goto out;
	}
	if (rm.last < rm.first)
		rm.last = rm.first;
	pfs_pb_set_meta(g, rm.first, rm.last - rm.first, rm.period);
	char **lines = pfs_xcalloc(4 + rm.n_begins, sizeof *lines);
	size_t nl = comment_lines(g->p, what, rm.n_snaps, rm.n_series, rm.first, rm.last, rm.rule,
				  rules->windows, rm.restarts, rm.begins, rm.n_begins, lines);
	g->p->comment = pfs_xcalloc(nl, sizeof *g->p->comment);
	for (size_t i = 0; i < nl; i++) {
		g->p->comment[g->p->n_comment++] = pfs_pb_str(g, lines[i]);
		free(lines[i]);
	}
	free(lines);
	rc = pfs_pb_finish(g, gz, gzlen, err, errlen);
	g = NULL;
out:
	pfs_pb_free(g);
	pfs_pprof_free(rm.p0);
	for (size_t i = 0; i < rm.n_begins; i++)
		free(rm.begins[i]);
	free(rm.begins);
	free(order);
	return rc;
}
