/* lib/names.c: path components from config and upstream names, times. */
#include "unit.h"

#include "lib/names.h"

#include <stdlib.h>

static void safe(void)
{
	CHECK(pfs_name_is_safe("checkout-7d9f.prod_1"));
	CHECK(!pfs_name_is_safe(""));
	CHECK(!pfs_name_is_safe("."));
	CHECK(!pfs_name_is_safe(".."));
	CHECK(!pfs_name_is_safe(".hidden"));
	CHECK(!pfs_name_is_safe("a/b"));
	CHECK(!pfs_name_is_safe("a b"));
	char long_name[202];
	memset(long_name, 'a', 201);
	long_name[201] = 0;
	CHECK(!pfs_name_is_safe(long_name));
	long_name[200] = 0;
	CHECK(pfs_name_is_safe(long_name));
}

static void sanitize(void)
{
	char out[16];

	pfs_name_sanitize("a/b c", out, sizeof out);
	CHECK_STR(out, "a_b_c");
	pfs_name_sanitize(".env", out, sizeof out);
	CHECK_STR(out, "_env");
	pfs_name_sanitize("", out, sizeof out);
	CHECK_STR(out, "_");
	pfs_name_sanitize("abcdefghijklmnopqrstuvwxyz", out, sizeof out);
	CHECK(strlen(out) == sizeof out - 1);
}

/* Names read like upstream's, never clash, never change between mounts. */
static void stable(void)
{
	char a[256], b[256], c[256];

	pfs_name_stable("checkout", a, sizeof a);
	CHECK_STR(a, "checkout");
	pfs_name_stable("shop/checkout", a, sizeof a);
	pfs_name_stable("shop_checkout", b, sizeof b);
	pfs_name_stable("shop/checkout", c, sizeof c);
	CHECK(strcmp(a, b) != 0);
	CHECK_STR(a, c);
	CHECK(strncmp(a, "shop_checkout~", 14) == 0);
	CHECK(pfs_name_is_safe(a) || strchr(a, '~'));
	CHECK(!strchr(a, '/'));
	pfs_name_stable("..", a, sizeof a);
	CHECK(strcmp(a, "..") && !strchr(a, '/'));
	char nul_free[] = "x\x01y";
	pfs_name_stable(nul_free, a, sizeof a);
	CHECK(strncmp(a, "x_y~", 4) == 0);
}

static void times(void)
{
	char name[PFS_TIME_NAME_MAX];
	time_t t;

	pfs_name_time(1764669600, name);
	CHECK_STR(name, "2025-12-02T10:00:00Z");
	CHECK(pfs_name_parse_time(name, &t) == 0 && t == 1764669600);
	/* only the form pfs_name_time writes */
	CHECK(pfs_name_parse_time("2025-12-02T10:00:00", &t) == -1);
	CHECK(pfs_name_parse_time("2025-12-02T10:00:60Z", &t) == -1);
	CHECK(pfs_name_parse_time("2025-2-02T10:00:00Z", &t) == -1);
	CHECK(pfs_name_parse_time("2025-12-02T10:00:00Z/..", &t) == -1);
	CHECK(pfs_name_parse_time("", &t) == -1);
	json_t *j = pfs_name_time_json(0);
	CHECK(json_is_null(j));
	json_decref(j);
}

int main(void)
{
	safe();
	sanitize();
	stable();
	times();
	return UNIT_END();
}
