/* Every secret profilefs sends (tokens, passwords, keys, header values,
 * URL userinfo and query values) is registered here before it is sent,
 * and masked ("***") in whatever text profilefs logs or serves, wherever
 * that text came from: an upstream's error page may echo the request. */
#ifndef PFS_SECRETS_H
#define PFS_SECRETS_H

#include <stdbool.h>
#include <stddef.h>

/* Mask s from now on (also its percent-encoded form); shorter than
 * PFS_SECRET_MIN characters is not masked (it would mask words). */
#define PFS_SECRET_MIN 3
void pfs_secret_add(const char *s);
/* HTTP basic auth's credentials as they travel: base64 of user:password. */
void pfs_secret_add_basic(const char *user, const char *password);
/* The secrets of a URL: its userinfo's password and the values of its
 * query's keys that name one (token, key, secret, pass, auth, sig, ...). */
void pfs_secret_add_url(const char *url);
/* Replace every registered secret in text (NUL-terminated, in place). */
void pfs_secret_mask(char *text);

/* True if a header of this name carries a secret (Authorization, Cookie,
 * names with token, key, secret or auth). */
bool pfs_secret_header(const char *name);

/* A secret's own copy: wiped, then freed (NULL is fine). */
void pfs_secret_free(char *s);

#endif
