/* dns_sd: DNS records, as Prometheus' dns_sd_configs. SRV records give
 * host and port; A or AAAA records give addresses, with the configured
 * port. Queries run on this mechanism's thread (glibc res_nquery, one
 * resolver state per thread), each bounded by its timeout, never on a
 * FUSE thread. With "server" (host:port, IPv4), that server is asked,
 * SRV targets are resolved to addresses through it too (the system
 * resolver does not know it). NXDOMAIN or no records is a definite empty
 * answer; a timeout or SERVFAIL keeps the last good set. Labels:
 * __meta_dns_name, and for SRV __meta_dns_srv_record_target and
 * __meta_dns_srv_record_port. */
#include "sd.h"
#include "lib/xalloc.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DNS_SRV, DNS_A, DNS_AAAA };

struct dns_sd {
	char **names;
	size_t n;
	int type;
	int port;
	double every, timeout;
	char *server;           /* "host:port" as given, or NULL */
	struct sockaddr_in addr; /* of server */
};

static int parse(struct pfs_parser *p, json_t *obj, const char *where,
		 const struct pfs_settings *s, void **priv)
{
	static const char *const keys[] = {"names", "type", "port", "server", "refresh_interval",
					   "timeout", NULL};
	struct dns_sd *d = pfs_xcalloc(1, sizeof *d);
	json_t *names = json_object_get(obj, "names"), *e, *pv;
	const char *type = "SRV", *server = NULL;
	char field[512];
	size_t i;

	*priv = d;
	d->every = 30; /* Prometheus' default */
	d->timeout = s->timeout < 5 ? s->timeout : 5;
	if (pfs_conf_keys(p, obj, where, keys) ||
	    pfs_conf_duration(p, obj, "refresh_interval", where, 1, PFS_DAY, &d->every) ||
	    pfs_conf_duration(p, obj, "timeout", where, 1, 60, &d->timeout) ||
	    pfs_conf_string(p, obj, "type", where, &type) ||
	    pfs_conf_string(p, obj, "server", where, &server))
		return -1;
	snprintf(field, sizeof field, "%snames", where);
	if (!json_is_array(names) || !json_array_size(names))
		return pfs_conf_fail(p, field, "must be a non-empty array of DNS names");
	d->names = pfs_xcalloc(json_array_size(names), sizeof *d->names);
	json_array_foreach(names, i, e) {
		if (!json_is_string(e) || !json_string_length(e) || json_string_length(e) > 253)
			return pfs_conf_fail(p, field, "[%zu] must be a DNS name", i);
		d->names[d->n++] = pfs_xstrdup(json_string_value(e));
	}
	snprintf(field, sizeof field, "%stype", where);
	if (strcmp(type, "SRV") == 0)
		d->type = DNS_SRV;
	else if (strcmp(type, "A") == 0)
		d->type = DNS_A;
	else if (strcmp(type, "AAAA") == 0)
		d->type = DNS_AAAA;
	else
		return pfs_conf_fail(p, field, "must be \"SRV\", \"A\" or \"AAAA\"");
	snprintf(field, sizeof field, "%sport", where);
	if ((pv = json_object_get(obj, "port"))) {
		if (!json_is_integer(pv) || json_integer_value(pv) < 1 || json_integer_value(pv) > 65535)
			return pfs_conf_fail(p, field, "must be a port number (1-65535)");
		d->port = (int)json_integer_value(pv);
	}
	if (d->type != DNS_SRV && !d->port)
		return pfs_conf_fail(p, field, "is required for type \"%s\"", type);
	if (server) {
		char host[64];
		const char *colon = strrchr(server, ':');
		int port = colon ? atoi(colon + 1) : 53;
		snprintf(field, sizeof field, "%sserver", where);
		snprintf(host, sizeof host, "%.*s", colon ? (int)(colon - server) : (int)strlen(server),
			 server);
		d->addr.sin_family = AF_INET;
		d->addr.sin_port = htons((uint16_t)port);
		if (port < 1 || port > 65535 || inet_pton(AF_INET, host, &d->addr.sin_addr) != 1)
			return pfs_conf_fail(p, field, "must be an IPv4 address with an optional port, "
					     "\"127.0.0.1:5353\"");
		d->server = pfs_xstrdup(server);
	}
	return 0;
}

/* The resolver state of one refresh: the configured server, the timeout. */
static int res_open(struct dns_sd *d, struct __res_state *rs)
{
	memset(rs, 0, sizeof *rs);
	if (res_ninit(rs))
		return -1;
	if (d->server) {
		rs->nscount = 1;
		rs->nsaddr_list[0] = d->addr;
	}
	rs->retrans = (int)d->timeout;
	rs->retry = 1;
	rs->options &= ~(unsigned long)(RES_DNSRCH | RES_DEFNAMES); /* names as given */
	return 0;
}

/* Query name for type; the answer into ans. 0 with records, 1 for a
 * definite "none" (NXDOMAIN, no data), -1 with why. */
static int query(struct __res_state *rs, const char *name, int type, uint8_t *ans, int anslen,
		 int *len, char *err, size_t errlen)
{
	*len = res_nquery(rs, name, ns_c_in, type, ans, anslen);
	if (*len >= 0)
		return 0;
	switch (rs->res_h_errno) {
	case HOST_NOT_FOUND:
	case NO_DATA:
		return 1;
	case TRY_AGAIN:
		snprintf(err, errlen, "%s: no answer (timeout or SERVFAIL)", name);
		return -1;
	default:
		snprintf(err, errlen, "%s: %s", name, hstrerror(rs->res_h_errno));
		return -1;
	}
}

/* The first A record of host through the configured server, or host. */
static void address_of(struct __res_state *rs, const char *host, char *out, size_t outlen)
{
	uint8_t ans[4096];
	int len;
	char err[128];
	ns_msg msg;
	ns_rr rr;

	snprintf(out, outlen, "%s", host);
	if (query(rs, host, ns_t_a, ans, sizeof ans, &len, err, sizeof err) ||
	    ns_initparse(ans, len, &msg))
		return;
	for (int i = 0; i < ns_msg_count(msg, ns_s_an); i++)
		if (ns_parserr(&msg, ns_s_an, i, &rr) == 0 && ns_rr_type(rr) == ns_t_a &&
		    ns_rr_rdlen(rr) == 4) {
			inet_ntop(AF_INET, ns_rr_rdata(rr), out, (socklen_t)outlen);
			return;
		}
}

static int refresh(struct pfs_sd *sd, void *priv, struct pfs_sd_set *out, char *err,
		   size_t errlen)
{
	struct dns_sd *d = priv;
	struct __res_state rs;
	int rc = 0;

	if (res_open(d, &rs)) {
		snprintf(err, errlen, "cannot set up the resolver (resolv.conf?)");
		return -1;
	}
	uint8_t *ans = pfs_xmalloc(65536); /* a TCP answer's most */
	for (size_t i = 0; i < d->n && !rc; i++) {
		int type = d->type == DNS_SRV ? ns_t_srv : d->type == DNS_A ? ns_t_a : ns_t_aaaa, len;
		ns_msg msg;
		ns_rr rr;

		if ((rc = query(&rs, d->names[i], type, ans, 65536, &len, err, errlen)) > 0) {
			rc = 0; /* none: this name adds nothing */
			continue;
		}
		if (rc)
			break;
		if (ns_initparse(ans, len, &msg)) {
			snprintf(err, errlen, "%s: a malformed answer", d->names[i]);
			rc = -1;
			break;
		}
		for (int k = 0; k < ns_msg_count(msg, ns_s_an); k++) {
			char addr[600], host[NS_MAXDNAME], port[8];
			if (ns_parserr(&msg, ns_s_an, k, &rr) || (int)ns_rr_type(rr) != type)
				continue; /* CNAMEs on the way */
			const uint8_t *rd = ns_rr_rdata(rr);
			if (out->n >= pfs_sd_max_targets(sd)) {
				snprintf(err, errlen, "more than max_targets (%zu) records",
					 pfs_sd_max_targets(sd));
				rc = -1;
				break;
			}
			if (type == ns_t_srv) {
				if (ns_rr_rdlen(rr) < 7 ||
				    dn_expand(ns_msg_base(msg), ns_msg_end(msg), rd + 6, host,
					      sizeof host) < 0)
					continue;
				snprintf(port, sizeof port, "%u", (unsigned)(rd[4] << 8 | rd[5]));
				char ip[256];
				if (d->server)
					address_of(&rs, host, ip, sizeof ip);
				else
					snprintf(ip, sizeof ip, "%s", host);
				snprintf(addr, sizeof addr, "%s:%s", ip, port);
				struct pfs_labels *l = pfs_sd_set_add(out);
				pfs_labels_set(l, "__address__", addr);
				pfs_labels_set(l, "__meta_dns_name", d->names[i]);
				pfs_labels_set(l, "__meta_dns_srv_record_target", host);
				pfs_labels_set(l, "__meta_dns_srv_record_port", port);
			} else {
				char ip[INET6_ADDRSTRLEN];
				if (ns_rr_rdlen(rr) != (type == ns_t_a ? 4 : 16) ||
				    !inet_ntop(type == ns_t_a ? AF_INET : AF_INET6, rd, ip, sizeof ip))
					continue;
				snprintf(addr, sizeof addr, type == ns_t_a ? "%s:%d" : "[%s]:%d", ip,
					 d->port);
				struct pfs_labels *l = pfs_sd_set_add(out);
				pfs_labels_set(l, "__address__", addr);
				pfs_labels_set(l, "__meta_dns_name", d->names[i]);
			}
		}
	}
	free(ans);
	res_nclose(&rs);
	return rc;
}

static void run(struct pfs_sd *sd, void *priv)
{
	pfs_sd_poll(sd, priv, ((struct dns_sd *)priv)->every, refresh, NULL);
}

static void describe(void *priv, char *out, size_t outlen)
{
	struct dns_sd *d = priv;

	snprintf(out, outlen, "%s %s%s%s%s", d->type == DNS_SRV ? "SRV" : d->type == DNS_A ? "A" : "AAAA",
		 d->n ? d->names[0] : "", d->n > 1 ? " ..." : "", d->server ? " @" : "",
		 d->server ? d->server : "");
}

static void free_priv(void *priv)
{
	struct dns_sd *d = priv;

	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++)
		free(d->names[i]);
	free(d->names);
	free(d->server);
	free(d);
}

const struct pfs_sd_ops pfs_sd_dns = {
	.name = "dns_sd",
	.parse = parse,
	.run = run,
	.free = free_priv,
	.describe = describe,
};
