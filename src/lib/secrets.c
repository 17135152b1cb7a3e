/* The registry of secrets and their masking (secrets.h). */
#include "secrets.h"
#include "xalloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MASK "***"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_secrets; /* longest first: a secret inside another is masked with it */
static size_t g_n, g_cap;

static void add_one(const char *s, size_t len)
{
	if (len < PFS_SECRET_MIN)
		return;
	for (size_t i = 0; i < g_n; i++)
		if (strlen(g_secrets[i]) == len && memcmp(g_secrets[i], s, len) == 0)
			return;
	if (g_n == g_cap) {
		g_cap = g_cap ? g_cap * 2 : 16;
		g_secrets = pfs_xrealloc(g_secrets, g_cap * sizeof *g_secrets);
	}
	size_t at = 0;
	while (at < g_n && strlen(g_secrets[at]) >= len)
		at++;
	memmove(g_secrets + at + 1, g_secrets + at, (g_n - at) * sizeof *g_secrets);
	g_secrets[at] = pfs_xstrndup(s, len);
	g_n++;
}

/* s as a URL query or path carries it: unreserved characters as they are,
 * the rest %XX. */
static void add_encoded(const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	char *e = pfs_xmalloc(len * 3 + 1);
	size_t o = 0;
	bool differs = false;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			e[o++] = (char)c;
		} else {
			e[o++] = '%', e[o++] = hex[c >> 4], e[o++] = hex[c & 15];
			differs = true;
		}
	}
	if (differs)
		add_one(e, o);
	memset(e, 0, o);
	free(e);
}

/* The decoded form of a %XX-encoded s. */
static void add_decoded(const char *s, size_t len)
{
	char *d = pfs_xmalloc(len + 1);
	size_t o = 0;
	bool differs = false;

	for (size_t i = 0; i < len; i++) {
		unsigned hi, lo;
		if (s[i] == '%' && i + 2 < len && sscanf(s + i + 1, "%1x%1x", &hi, &lo) == 2) {
			d[o++] = (char)(hi << 4 | lo);
			i += 2;
			differs = true;
		} else {
			d[o++] = s[i];
		}
	}
	if (differs)
		add_one(d, o);
	memset(d, 0, o);
	free(d);
}

static void add_all(const char *s, size_t len)
{
	add_one(s, len);
	add_encoded(s, len);
	add_decoded(s, len);
}

void pfs_secret_add(const char *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&g_lock);
	add_all(s, strlen(s));
	pthread_mutex_unlock(&g_lock);
}

void pfs_secret_add_basic(const char *user, const char *password)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n, o = 0;
	char *in, *out;

	if (!user || !password)
		return;
	n = strlen(user) + 1 + strlen(password);
	in = pfs_xmalloc(n + 1);
	out = pfs_xmalloc((n + 2) / 3 * 4 + 1);
	snprintf(in, n + 1, "%s:%s", user, password);
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned char)in[i] << 16 | (i + 1 < n ? (unsigned char)in[i + 1] << 8 : 0) |
			     (i + 2 < n ? (unsigned char)in[i + 2] : 0);
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	pthread_mutex_lock(&g_lock);
	add_one(out, o);
	pthread_mutex_unlock(&g_lock);
	memset(in, 0, n);
	memset(out, 0, o);
	free(in);
	free(out);
}

/* A query key that names a secret (token=, api_key=, X-Amz-Signature=,
 * password=, sig=, ...); prefix=, seconds=, format= are no secrets. */
static bool secret_key(const char *k, size_t n)
{
	static const char *const words[] = {"token", "key",  "secret",     "pass", "pwd",
					    "auth",  "sig",  "credential", "session", "jwt"};
	char low[64];

	if (n >= sizeof low)
		n = sizeof low - 1;
	for (size_t i = 0; i < n; i++)
		low[i] = (char)(k[i] >= 'A' && k[i] <= 'Z' ? k[i] - 'A' + 'a' : k[i]);
	low[n] = 0;
	for (size_t i = 0; i < sizeof words / sizeof *words; i++)
		if (strstr(low, words[i]))
			return true;
	return false;
}

void pfs_secret_add_url(const char *url)
{
	const char *scheme, *auth, *end, *at, *colon, *q;

	if (!url || !(scheme = strstr(url, "://")))
		return;
	pthread_mutex_lock(&g_lock);
	auth = scheme + 3;
	end = auth + strcspn(auth, "/?#");
	at = memchr(auth, '@', (size_t)(end - auth));
	char *user = NULL, *pass = NULL;
	if (at && (colon = memchr(auth, ':', (size_t)(at - auth)))) { /* user:password@ */
		add_all(colon + 1, (size_t)(at - colon - 1));
		user = pfs_xstrndup(auth, (size_t)(colon - auth)); /* sent as basic auth */
		pass = pfs_xstrndup(colon + 1, (size_t)(at - colon - 1));
	}
	if ((q = strchr(end, '?'))) /* the values of the query's secret keys */
		for (const char *p = q + 1; *p && *p != '#';) {
			size_t n = strcspn(p, "&#");
			const char *eq = memchr(p, '=', n);
			if (eq && secret_key(p, (size_t)(eq - p)))
				add_all(eq + 1, n - (size_t)(eq + 1 - p));
			p += n + (p[n] == '&');
		}
	pthread_mutex_unlock(&g_lock);
	if (user) {
		pfs_secret_add_basic(user, pass);
		memset(pass, 0, strlen(pass));
	}
	free(user);
	free(pass);
}

void pfs_secret_mask(char *text)
{
	if (!text)
		return;
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < g_n; i++) {
		size_t len = strlen(g_secrets[i]);
		char *p = text;
		while ((p = strstr(p, g_secrets[i]))) {
			/* len >= 3: the text only shrinks */
			memcpy(p, MASK, 3);
			memmove(p + 3, p + len, strlen(p + len) + 1);
			p += 3;
		}
	}
	pthread_mutex_unlock(&g_lock);
}

bool pfs_secret_header(const char *name)
{
	return strcasecmp(name, "authorization") == 0 || strcasecmp(name, "cookie") == 0 ||
	       strcasestr(name, "token") || strcasestr(name, "key") || strcasestr(name, "secret") ||
	       strcasestr(name, "auth");
}

void pfs_secret_free(char *s)
{
	if (s)
		explicit_bzero(s, strlen(s));
	free(s);
}
