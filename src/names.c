/* Path component rules shared by config names and upstream names. */
#include "names.h"

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
