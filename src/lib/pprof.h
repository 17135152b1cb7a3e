/* pprof codec: the gzip-compressed perftools.profiles.Profile format. */
#ifndef PFS_PPROF_H
#define PFS_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The profiles a Go program serves (net/http/pprof), in file order. */
enum pfs_profile {
	PFS_HEAP,
	PFS_ALLOCS,
	PFS_GOROUTINE,
	PFS_BLOCK,
	PFS_MUTEX,
	PFS_THREADCREATE,
	PFS_CPU,
	PFS_NPROFILES
};

extern const char *const pfs_profile_names[PFS_NPROFILES];

/* Inflate a complete gzip stream (no trailing bytes) into *out (malloc'd).
 * Fails on a bad header, truncation, CRC mismatch or more than max_out
 * bytes of output, or when the memory budget is spent. Returns 0 or -1
 * with a reason in err. */
int pfs_gunzip(const uint8_t *in, size_t len, size_t max_out, uint8_t **out, size_t *outlen,
	       char *err, size_t errlen);

/* Free what pfs_gunzip() made (and give its bytes back to the budget). */
void pfs_gunzip_free(uint8_t *out, size_t outlen);

/* gzip (with header and CRC) len bytes into *out (malloc'd). */
int pfs_gzip(const uint8_t *in, size_t len, uint8_t **out, size_t *outlen, char *err,
	     size_t errlen);

struct Perftools__Profiles__Profile;
/* Gunzip, decode and check a profile (as pfs_pprof_validate_gz); NULL with
 * a reason in err. Free with pfs_pprof_free. */
struct Perftools__Profiles__Profile *pfs_pprof_decode_gz(const uint8_t *buf, size_t len,
							size_t max_raw, char *err, size_t errlen);
/* Free a decoded profile (its memory is charged to the budget). */
void pfs_pprof_free(struct Perftools__Profiles__Profile *p);
/* Decode and check an uncompressed profile.proto. */
struct Perftools__Profiles__Profile *pfs_pprof_decode_raw(const uint8_t *raw, size_t len,
							 char *err, size_t errlen);

/* True if p has functions but none with a start_line: Go's PGO (go build
 * -pgo) rejects such a profile ("profile missing Function.start_line
 * data"): a program built by Go < 1.20, or data without lines (Coroot). */
bool pfs_pprof_lacks_start_line(const struct Perftools__Profiles__Profile *p);

/* Check that buf is what a pprof endpoint serves: a gzip stream of a
 * Profile that decodes, has string_table[0] == "", at least one sample
 * type, in-range string indices for the sample types and one value per
 * sample type in every sample. Returns 0 or -1 with a reason in err;
 * *no_start_line (may be NULL) as pfs_pprof_lacks_start_line. */
int pfs_pprof_validate_gz(const uint8_t *buf, size_t len, size_t max_raw, bool *no_start_line,
			  char *err, size_t errlen);

#endif
