/* s3/sign.c and lib/s3xml.c: what S3 requests need, and S3's XML. */
#include "unit.h"

#include "lib/s3xml.h"
#include "lib/target.h"
#include "s3/s3.h"

#include <stdlib.h>

static void encode(void)
{
	char *e = pfs_s3_encode("a b/c~d_e-f.g+h=", false);
	CHECK_STR(e, "a%20b%2Fc~d_e-f.g%2Bh%3D");
	free(e);
	e = pfs_s3_encode("prod/checkout/2026-12-07T10:00:00Z/heap.pb.gz", true);
	CHECK_STR(e, "prod/checkout/2026-12-07T10%3A00%3A00Z/heap.pb.gz");
	free(e);
	struct pfs_target t = {.url = "http://127.0.0.1:8080"};
	e = pfs_s3_object_url(&t, "profiles", "a b/c");
	CHECK_STR(e, "http://127.0.0.1:8080/profiles/a%20b/c");
	free(e);
}

static void child(void)
{
	size_t n = 0;

	CHECK(pfs_s3_child("prod/checkout/", "prod/", 5, &n) && n == 8);
	CHECK(!pfs_s3_child("prod/", "prod/", 5, &n));          /* the prefix itself */
	/* a server's odd prefix: the child as it is (registry.c sanitizes names) */
	CHECK(pfs_s3_child("prod/a/b/", "prod/", 5, &n) && n == 3);
	CHECK(!pfs_s3_child("other/checkout/", "prod/", 5, &n)); /* not under it */
}

static void list(void)
{
	const char *xml =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
		"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount>"
		"<IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken>"
		"<Contents><Key>p/heap.pb.gz</Key><Size>123</Size></Contents>"
		"<CommonPrefixes><Prefix>p/2026-12-07T10:00:00Z/</Prefix></CommonPrefixes>"
		"</ListBucketResult>";
	struct pfs_s3_list l;
	char err[256];

	CHECK(pfs_s3_parse_list(xml, strlen(xml), &l, err, sizeof err) == 0);
	CHECK(l.n_objects == 1 && l.objects[0].size == 123);
	CHECK_STR(l.objects[0].key, "p/heap.pb.gz");
	CHECK(l.n_prefixes == 1);
	CHECK_STR(l.prefixes[0], "p/2026-12-07T10:00:00Z/");
	CHECK(l.truncated);
	CHECK_STR(l.next_token, "t&1");
	pfs_s3_list_free(&l);

	const char *bad = "<!DOCTYPE x [<!ENTITY a \"b\">]><ListBucketResult/>";
	CHECK(pfs_s3_parse_list(bad, strlen(bad), &l, err, sizeof err) == -1);
	pfs_s3_list_free(&l);
	char deep[4096] = "";
	for (int i = 0; i < 200; i++)
		strcat(deep, "<a>");
	CHECK(pfs_s3_parse_list(deep, strlen(deep), &l, err, sizeof err) == -1);
	pfs_s3_list_free(&l);
}

static void errors(void)
{
	const char *xml = "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code>"
			  "<Message>The specified bucket does not exist</Message></Error>";
	char out[128];

	CHECK(pfs_s3_error_text((const uint8_t *)xml, strlen(xml), out, sizeof out));
	CHECK_STR(out, "NoSuchBucket: The specified bucket does not exist");
	CHECK(!pfs_s3_error_text((const uint8_t *)"not found", 9, out, sizeof out));
	CHECK(!pfs_s3_error_text(NULL, 0, out, sizeof out));
}

int main(void)
{
	encode();
	child();
	list();
	errors();
	return UNIT_END();
}
