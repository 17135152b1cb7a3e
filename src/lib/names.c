/* Path component rules shared by config names and upstream names. */
#include "names.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define PFS_NAME_MAX 200

static bool safe_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool pfs_name_is_safe(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > PFS_NAME_MAX || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!safe_char((unsigned char)s[i]))
			return false;
	return true;
}

void pfs_name_sanitize(const char *s, char *out, size_t outlen)
{
	size_t max = outlen - 1 < PFS_NAME_MAX ? outlen - 1 : PFS_NAME_MAX;
	size_t j = 0;

	for (size_t i = 0; s[i] && j < max; i++)
		out[j++] = safe_char((unsigned char)s[i]) ? s[i] : '_';
	if (j == 0)
		out[j++] = '_';
	if (out[0] == '.')
		out[0] = '_';
	out[j] = '\0';
}

uint64_t pfs_fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	return h;
}

void pfs_name_stable(const char *s, char *out, size_t outlen)
{
	uint64_t h = pfs_fnv1a(PFS_FNV_INIT, s);
	char base[PFS_NAME_MAX + 1];
	size_t room;

	if (pfs_name_is_safe(s) && strlen(s) < outlen) {
		snprintf(out, outlen, "%s", s);
		return;
	}
	/* "~" + 10 hex digits + NUL after the base */
	room = outlen > 12 ? outlen - 12 : 1;
	pfs_name_sanitize(s, base, room < sizeof base - 20 ? room : sizeof base - 20);
	snprintf(out, outlen, "%s~%010llx", base, (unsigned long long)((h ^ (h >> 40)) & 0xffffffffffULL));
}

void pfs_name_time(time_t t, char out[PFS_TIME_NAME_MAX])
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, PFS_TIME_NAME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int pfs_name_parse_time(const char *name, time_t *t)
{
	char back[PFS_TIME_NAME_MAX];
	struct tm tm = {0};
	const char *end = strptime(name, "%Y-%m-%dT%H:%M:%SZ", &tm);

	if (!end || *end)
		return -1;
	*t = timegm(&tm);
	pfs_name_time(*t, back);
	return strcmp(back, name) == 0 ? 0 : -1;
}

json_t *pfs_name_time_json(time_t t)
{
	char buf[PFS_TIME_NAME_MAX];

	if (!t)
		return json_null();
	pfs_name_time(t, buf);
	return json_string(buf);
}
