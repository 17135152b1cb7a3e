/* pprof codec: gunzip and structural validation of profile.proto. */
#include "pprof.h"

#include "mem.h"
#include "profile.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

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
	if (!pfs_mem_take(cap) || !(buf = malloc(cap))) {
		snprintf(err, errlen, "memory budget spent (max_memory %zu bytes)", pfs_mem_max());
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
			uint8_t *b = realloc(buf, want);
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
		uint8_t *b = realloc(buf, n);
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

static int check_profile(const Perftools__Profiles__Profile *p, char *err, size_t errlen)
{
	int64_t nstr = (int64_t)p->n_string_table;

	if (nstr < 1 || p->string_table[0][0] != '\0') {
		snprintf(err, errlen, "profile.proto: string_table[0] is not \"\"");
		return -1;
	}
	if (p->n_sample_type < 1) {
		snprintf(err, errlen, "profile.proto: no sample_type");
		return -1;
	}
	for (size_t i = 0; i < p->n_sample_type; i++) {
		const Perftools__Profiles__ValueType *vt = p->sample_type[i];
		if (vt->type < 0 || vt->type >= nstr || vt->unit < 0 || vt->unit >= nstr) {
			snprintf(err, errlen, "profile.proto: sample_type[%zu] string index out of range", i);
			return -1;
		}
	}
	for (size_t i = 0; i < p->n_sample; i++)
		if (p->sample[i]->n_value != p->n_sample_type) {
			snprintf(err, errlen, "profile.proto: sample %zu has %zu values for %zu sample types",
				 i, p->sample[i]->n_value, p->n_sample_type);
			return -1;
		}
	return 0;
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

	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		snprintf(err, errlen, "zlib init failed");
		return -1;
	}
	cap = deflateBound(&z, (uLong)len) + 32;
	buf = malloc(cap);
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
