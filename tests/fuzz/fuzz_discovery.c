/* libFuzzer: what discovery reads from outside. Any bytes as a Prometheus
 * target group document (file_sd, http_sd) and as a Kubernetes pod (the
 * watch's objects): label sets or an error; never a crash, a leak or
 * undefined behaviour, and every label set has bounded values. */
#include "discovery/sd.h"

#include <stdlib.h>
#include <string.h>

static void check(const struct pfs_sd_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		for (size_t k = 0; k < s->t[i].n; k++)
			if (!s->t[i].kv[2 * k] || !s->t[i].kv[2 * k + 1])
				abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct pfs_sd_set set = {0};
	char err[512];

	if (pfs_sd_parse_groups((const char *)data, size, "__meta_filepath", "/x", 1000, &set, err,
				sizeof err) == 0)
		check(&set);
	else if (!err[0])
		abort(); /* a failure says why */
	pfs_sd_set_free(&set);
	for (size_t ns = 0; ns < 2; ns++) {
		pfs_sd_kube_pod_labels((const char *)data, size, ns, &set);
		check(&set);
		pfs_sd_set_free(&set);
	}
	return 0;
}
