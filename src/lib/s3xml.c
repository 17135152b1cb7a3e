/* S3's XML answers: a reader of just the XML S3 sends (elements,
 * attributes skipped, text with XML's five entities and character
 * references), with every bound explicit. */
#include "s3xml.h"
#include "xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 8
#define MAX_NAME 64
#define MAX_TEXT 4096 /* S3 keys are at most 1024 bytes */

struct reader {
	const char *p, *end;
	char path[MAX_DEPTH][MAX_NAME];
	int depth;
	char text[MAX_TEXT];
	size_t n_text;
	bool leaf; /* no child element since the last start tag */
	/* called at each end tag with the element's own text (leaves) */
	int (*on_end)(struct reader *r, void *arg);
	void *arg;
	char *err;
	size_t errlen;
};

static int fail(struct reader *r, const char *why)
{
	snprintf(r->err, r->errlen, "S3 answer: %s", why);
	return -1;
}

static bool is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-' || c == '.' || c == ':';
}

static void put_utf8(struct reader *r, unsigned long cp)
{
	char b[4];
	size_t n;

	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (char)(0xf0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	if (r->n_text + n < MAX_TEXT) {
		memcpy(r->text + r->n_text, b, n);
		r->n_text += n;
	} else {
		r->n_text = MAX_TEXT; /* marks it too long */
	}
}

/* Text up to the next '<', entities decoded. */
static int read_text(struct reader *r)
{
	static const struct { const char *name; char c; } ents[] = {
		{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};

	while (r->p < r->end && *r->p != '<') {
		if (*r->p != '&') { /* bytes as they are (UTF-8) */
			if (r->n_text + 1 < MAX_TEXT)
				r->text[r->n_text++] = *r->p;
			else
				r->n_text = MAX_TEXT;
			r->p++;
			continue;
		}
		r->p++;
		size_t left = (size_t)(r->end - r->p);
		bool done = false;
		for (size_t i = 0; i < sizeof ents / sizeof *ents && !done; i++) {
			size_t n = strlen(ents[i].name);
			if (left >= n && memcmp(r->p, ents[i].name, n) == 0) {
				put_utf8(r, (unsigned char)ents[i].c);
				r->p += n;
				done = true;
			}
		}
		if (done)
			continue;
		if (left < 3 || *r->p != '#')
			return fail(r, "an entity other than XML's five");
		int base = r->p[1] == 'x' ? 16 : 10;
		const char *q = r->p + (base == 16 ? 2 : 1);
		unsigned long cp = 0;
		int digits = 0;
		for (; q < r->end && *q != ';' && digits < 8; q++, digits++) {
			int v = *q >= '0' && *q <= '9' ? *q - '0'
				: base == 16 && *q >= 'a' && *q <= 'f' ? *q - 'a' + 10
				: base == 16 && *q >= 'A' && *q <= 'F' ? *q - 'A' + 10 : -1;
			if (v < 0)
				return fail(r, "a bad character reference");
			cp = cp * (unsigned long)base + (unsigned long)v;
		}
		if (q >= r->end || *q != ';' || !digits || cp == 0 || cp > 0x10ffff)
			return fail(r, "a bad character reference");
		put_utf8(r, cp);
		r->p = q + 1;
	}
	return 0;
}

static int read_name(struct reader *r, char out[MAX_NAME])
{
	size_t n = 0;

	while (r->p < r->end && is_name_char(*r->p)) {
		if (n + 1 >= MAX_NAME)
			return fail(r, "an element name too long");
		out[n++] = *r->p++;
	}
	out[n] = '\0';
	return n ? 0 : fail(r, "a tag without a name");
}

/* Skip to just past `end` (a declaration or comment). */
static int skip_past(struct reader *r, const char *end)
{
	size_t n = strlen(end);

	for (; r->p + n <= r->end; r->p++)
		if (memcmp(r->p, end, n) == 0) {
			r->p += n;
			return 0;
		}
	return fail(r, "truncated");
}

static int parse(struct reader *r)
{
	bool root_seen = false;

	while (r->p < r->end) {
		if (*r->p != '<') {
			if (r->depth == 0) { /* only whitespace outside the root */
				if (*r->p != ' ' && *r->p != '\n' && *r->p != '\r' && *r->p != '\t')
					return fail(r, "not XML");
				r->p++;
				continue;
			}
			if (read_text(r))
				return -1;
			continue;
		}
		r->p++;
		if (r->p < r->end && *r->p == '?') {
			if (skip_past(r, "?>"))
				return -1;
		} else if (r->end - r->p >= 3 && memcmp(r->p, "!--", 3) == 0) {
			if (skip_past(r, "-->"))
				return -1;
		} else if (r->p < r->end && *r->p == '!') {
			return fail(r, "a DTD or CDATA section");
		} else if (r->p < r->end && *r->p == '/') {
			char name[MAX_NAME];
			r->p++;
			if (read_name(r, name))
				return -1;
			while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
				r->p++;
			if (r->p >= r->end || *r->p != '>')
				return fail(r, "truncated");
			r->p++;
			if (r->depth == 0 || strcmp(name, r->path[r->depth - 1]))
				return fail(r, "an end tag that does not match");
			if (r->n_text >= MAX_TEXT)
				return fail(r, "a text too long");
			r->text[r->n_text] = '\0';
			if (!r->leaf)
				r->text[0] = '\0';
			if (r->on_end(r, r->arg))
				return -1;
			r->depth--;
			r->n_text = 0;
			r->leaf = false;
		} else {
			if (r->depth == 0 && root_seen)
				return fail(r, "two root elements");
			if (r->depth == MAX_DEPTH)
				return fail(r, "nested too deep");
			if (read_name(r, r->path[r->depth]))
				return -1;
			/* attributes: skipped, quotes respected */
			char quote = 0;
			while (r->p < r->end && (quote || (*r->p != '>' && *r->p != '/'))) {
				if (quote && *r->p == quote)
					quote = 0;
				else if (!quote && (*r->p == '"' || *r->p == '\''))
					quote = *r->p;
				r->p++;
			}
			if (r->p >= r->end)
				return fail(r, "truncated");
			bool empty = *r->p == '/';
			r->p += empty ? 1 : 0;
			if (r->p >= r->end || *r->p != '>')
				return fail(r, "truncated");
			r->p++;
			root_seen = true;
			r->depth++;
			r->n_text = 0;
			r->leaf = true;
			if (empty) {
				r->text[0] = '\0';
				if (r->on_end(r, r->arg))
					return -1;
				r->depth--;
				r->leaf = false;
			}
		}
	}
	if (r->depth || !root_seen)
		return fail(r, "truncated");
	return 0;
}

static int read_xml(const char *xml, size_t len, int (*on_end)(struct reader *, void *), void *arg,
		    char *err, size_t errlen)
{
	struct reader *r = pfs_xcalloc(1, sizeof *r);
	int rc;

	if (!xml) /* no body at all (NULL + 0 is undefined) */
		xml = "", len = 0;
	r->p = xml;
	r->end = xml + len;
	r->on_end = on_end;
	r->arg = arg;
	r->err = err;
	r->errlen = errlen;
	rc = parse(r);
	free(r);
	return rc;
}

static bool at(const struct reader *r, int depth, const char *a, const char *b, const char *c)
{
	const char *want[3] = {a, b, c};

	if (r->depth != depth)
		return false;
	for (int i = 0; i < depth; i++)
		if (strcmp(r->path[i], want[i]))
			return false;
	return true;
}

/* ---- Error ---- */

struct error_doc {
	char code[128], message[256];
	bool is_error;
};

static int on_error_end(struct reader *r, void *arg)
{
	struct error_doc *e = arg;

	if (r->depth == 1)
		e->is_error = strcmp(r->path[0], "Error") == 0;
	else if (at(r, 2, "Error", "Code", NULL))
		snprintf(e->code, sizeof e->code, "%s", r->text);
	else if (at(r, 2, "Error", "Message", NULL))
		snprintf(e->message, sizeof e->message, "%s", r->text);
	return 0;
}

static void printable(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			*s = '?';
}

bool pfs_s3_error_text(const uint8_t *body, size_t len, char *out, size_t outlen)
{
	struct error_doc e = {0};
	char err[128];

	if (len > (1u << 16) || read_xml((const char *)body, len, on_error_end, &e, err, sizeof err) ||
	    !e.is_error || !e.code[0])
		return false;
	printable(e.code);
	printable(e.message);
	snprintf(out, outlen, "%s%s%s", e.code, e.message[0] ? ": " : "", e.message);
	return true;
}

/* ---- ListBucketResult ---- */

struct list_doc {
	struct pfs_s3_list *l;
	size_t cap_objects, cap_prefixes;
	char *key;
	uint64_t size;
	bool has_size;
	bool is_list;
};

static int on_list_end(struct reader *r, void *arg)
{
	struct list_doc *d = arg;
	struct pfs_s3_list *l = d->l;

	if (r->depth == 1) {
		d->is_list = strcmp(r->path[0], "ListBucketResult") == 0;
	} else if (r->depth >= 2 && strcmp(r->path[0], "ListBucketResult")) {
		return 0; /* an Error document: its caller reports it */
	} else if (at(r, 3, "ListBucketResult", "Contents", "Key")) {
		free(d->key);
		d->key = pfs_xstrdup(r->text);
	} else if (at(r, 3, "ListBucketResult", "Contents", "Size")) {
		char *end;
		unsigned long long v = strtoull(r->text, &end, 10);
		if (!r->text[0] || *end || r->text[0] == '-')
			return fail(r, "an object Size that is not a number");
		d->size = v;
		d->has_size = true;
	} else if (at(r, 2, "ListBucketResult", "Contents", NULL)) {
		if (!d->key || !d->has_size)
			return fail(r, "an object without Key or Size");
		if (l->n_objects == d->cap_objects) {
			d->cap_objects = d->cap_objects ? d->cap_objects * 2 : 64;
			l->objects = pfs_xrealloc(l->objects, d->cap_objects * sizeof *l->objects);
		}
		l->objects[l->n_objects].key = d->key;
		l->objects[l->n_objects++].size = d->size;
		d->key = NULL;
		d->has_size = false;
	} else if (at(r, 3, "ListBucketResult", "CommonPrefixes", "Prefix")) {
		if (l->n_prefixes == d->cap_prefixes) {
			d->cap_prefixes = d->cap_prefixes ? d->cap_prefixes * 2 : 64;
			l->prefixes = pfs_xrealloc(l->prefixes, d->cap_prefixes * sizeof *l->prefixes);
		}
		l->prefixes[l->n_prefixes++] = pfs_xstrdup(r->text);
	} else if (at(r, 2, "ListBucketResult", "IsTruncated", NULL)) {
		l->truncated = strcmp(r->text, "true") == 0;
	} else if (at(r, 2, "ListBucketResult", "NextContinuationToken", NULL)) {
		free(l->next_token);
		l->next_token = pfs_xstrdup(r->text);
	}
	return 0;
}

int pfs_s3_parse_list(const char *xml, size_t len, struct pfs_s3_list *out, char *err,
		      size_t errlen)
{
	struct list_doc d = {.l = out};
	char text[300];
	int rc;

	memset(out, 0, sizeof *out);
	rc = read_xml(xml, len, on_list_end, &d, err, errlen);
	free(d.key);
	if (rc)
		return -1;
	if (!d.is_list) {
		if (pfs_s3_error_text((const uint8_t *)xml, len, text, sizeof text))
			snprintf(err, errlen, "S3 error %s", text);
		else
			snprintf(err, errlen, "S3 answer: not a ListBucketResult");
		return -1;
	}
	if (out->truncated && (!out->next_token || !out->next_token[0])) {
		snprintf(err, errlen, "S3 answer: truncated without a NextContinuationToken");
		return -1;
	}
	return 0;
}

void pfs_s3_list_free(struct pfs_s3_list *l)
{
	for (size_t i = 0; i < l->n_objects; i++)
		free(l->objects[i].key);
	free(l->objects);
	for (size_t i = 0; i < l->n_prefixes; i++)
		free(l->prefixes[i]);
	free(l->prefixes);
	free(l->next_token);
	memset(l, 0, sizeof *l);
}
