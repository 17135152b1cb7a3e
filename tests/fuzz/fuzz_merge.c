/* libFuzzer: merge of two profiles (the input split at its first byte's
 * value), each also merged with itself, plainly and as a Go PGO profile; a
 * merge that succeeds must give a profile that validates. The same two as
 * snapshots over time (merge.h pfs_pprof_merge_range): one target's a, b,
 * a again (a restart, or stacks that come and go: differences of every
 * shape), another's base b then a (a type missing from one, stacks
 * reordered), by Go's rules and as API windows. */
#include "lib/mem.h"
#include "lib/merge.h"
#include "lib/pprof.h"
#include "profile.pb-c.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	uint8_t *gz[2] = {NULL, NULL}, *out = NULL;
	size_t gzlen[2] = {0, 0}, outlen, cut;
	char err[256];

	if (size < 2)
		return 0;
	pfs_mem_init(256u << 20);
	cut = 1 + data[0] % (size - 1);
	if (pfs_gzip(data + 1, cut - 1, &gz[0], &gzlen[0], err, sizeof err) == 0 &&
	    pfs_gzip(data + cut, size - cut, &gz[1], &gzlen[1], err, sizeof err) == 0) {
		const uint8_t *in[3] = {gz[0], gz[1], gz[0]};
		size_t lens[3] = {gzlen[0], gzlen[1], gzlen[0]};
		if (pfs_pprof_merge(in, lens, 3, 64u << 20, &out, &outlen, err, sizeof err) == 0) {
			if (pfs_pprof_validate_gz(out, outlen, 256u << 20, NULL, err, sizeof err))
				abort(); /* a merge of valid profiles is a valid profile */
			free(out);
		}
		const struct pfs_merge_in snaps[5] = {
			{gz[0], gzlen[0], 0, 10, false, "a"}, {gz[1], gzlen[1], 0, 20, false, "a"},
			{gz[0], gzlen[0], 0, 30, false, "a"}, {gz[1], gzlen[1], 1, 5, true, "b"},
			{gz[0], gzlen[0], 1, 15, false, "b"},
		};
		for (int w = 0; w < 2; w++) {
			const struct pfs_merge_rules rules = {.windows = w};
			if (pfs_pprof_merge_range(snaps, 5, 64u << 20, &rules, "fuzz", NULL, &out, &outlen,
						  err, sizeof err) == 0) {
				if (pfs_pprof_validate_gz(out, outlen, 256u << 20, NULL, err, sizeof err))
					abort(); /* a merge over time is valid too */
				free(out);
			}
		}
		/* one snapshot in range, as the daemon merges it: a validated one
		 * (every input of the daemon's merges is), on its bytes */
		for (int k = 0; k < 4; k++) {
			const struct pfs_merge_rules rules = {0};
			struct pfs_merge_shape shape;
			if (pfs_pprof_validate_gz(gz[k % 2], gzlen[k % 2], 64u << 20, NULL, err,
						  sizeof err) ||
			    pfs_pprof_merge_range(&snaps[k % 2], 1, 64u << 20, &rules, "fuzz",
						  k < 2 ? NULL : &shape, &out, &outlen, err, sizeof err))
				continue;
			if (k < 2 || !shape.follows) {
				if (pfs_pprof_validate_gz(out, outlen, 256u << 20, NULL, err, sizeof err))
					abort();
			} else { /* the snapshot's bytes, then these: one profile */
				uint8_t *a, *b;
				size_t alen, blen;
				if (pfs_gunzip(gz[k % 2], gzlen[k % 2], 64u << 20, &a, &alen, err,
					       sizeof err) ||
				    pfs_gunzip(out, outlen, 64u << 20, &b, &blen, err, sizeof err))
					abort();
				uint8_t *ab = malloc(alen + blen);
				memcpy(ab, a, alen);
				memcpy(ab + alen, b, blen);
				struct Perftools__Profiles__Profile *p =
					pfs_pprof_decode_raw(ab, alen + blen, err, sizeof err);
				if (!p || p->n_comment < 1)
					abort();
				pfs_pprof_free(p);
				free(ab);
				pfs_gunzip_free(a, alen);
				pfs_gunzip_free(b, blen);
			}
			free(out);
		}
		size_t used;
		bool no_start_line = true;
		if (pfs_pprof_pgo(in, lens, 3, 64u << 20, &used, &out, &outlen, err, sizeof err) == 0) {
			if (pfs_pprof_validate_gz(out, outlen, 256u << 20, &no_start_line, err,
						  sizeof err) || used == 0)
				abort(); /* so is a PGO profile of them, */
			if (no_start_line)
				abort(); /* made of those with start_line only */
			free(out);
		}
	}
	free(gz[0]);
	free(gz[1]);
	return 0;
}
