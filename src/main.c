/* profilefs: command line, mount, and the FUSE loop. */
#include "config/config.h"
#include "discovery/discovery.h"
#include "fs/fs.h"
#include "lib/cache.h"
#include "lib/fetch.h"
#include "lib/log.h"
#include "lib/mem.h"
#include "lib/work.h"
#include "merged/merged.h"
#include "registry/registry.h"
#include "s3/upload.h"
#include "snap/snap.h"
#include "source/source.h"
#include "lib/xalloc.h"

#include <curl/curl.h>
#include <fuse_lowlevel.h>
#include <jansson.h>
#include <nats/nats.h>
#include <protobuf-c/protobuf-c.h>
#include <errno.h>
#include <limits.h>
#include <sys/resource.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define EXIT_USAGE 2

/* What a lower room tells a higher one goes through a hook wired here
 * (calls go down only; README, Layout): the registry asks the sources to
 * look for a service it does not know and tells the index of one added;
 * the index tells the uploader of a settled round. fs/ wires its own. */
static void discover_unknown(struct pfs_cluster *c)
{
	pfs_source_refresh(c, 5);
}

static void wire_hooks(void)
{
	pfs_registry_set_hooks(pfs_snap_service_init, discover_unknown);
	pfs_snap_set_settled_hook(pfs_upload_round);
}

struct cli {
	char *config;
	char *log_file;
	char *log_level;
	char *positional[3];
	int n_positional;
	int help;
	int version;
	int check;
	char *bad_option; /* the first option neither ours nor libfuse's */
	char *options[32]; /* -o key=value for config fields */
	size_t n_options;
};

enum { KEY_HELP, KEY_VERSION, KEY_CHECK };

static const struct fuse_opt cli_spec[] = {
	{"-c %s", offsetof(struct cli, config), 0},
	/* long options are "--opt=value" here: long_options() joins "--opt
	 * value" (a template "--opt %s" would also take "--opt=value" as the
	 * value "=value") */
	{"--config=%s", offsetof(struct cli, config), 0},
	{"config=%s", offsetof(struct cli, config), 0},
	{"--log-file=%s", offsetof(struct cli, log_file), 0},
	{"log=%s", offsetof(struct cli, log_file), 0},
	{"--log-level=%s", offsetof(struct cli, log_level), 0},
	{"log_level=%s", offsetof(struct cli, log_level), 0},
	FUSE_OPT_KEY("--check", KEY_CHECK),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_END,
};

/* The dash options fuse_parse_cmdline takes (besides -o, split already). */
static bool fuse_flag(const char *arg)
{
	return strcmp(arg, "-f") == 0 || strcmp(arg, "-d") == 0 || strcmp(arg, "-s") == 0 ||
	       strcmp(arg, "-o") == 0;
}

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *args)
{
	struct cli *c = data;

	(void)args;
	switch (key) {
	case KEY_HELP:
		c->help = 1;
		return 0;
	case KEY_VERSION:
		c->version = 1;
		return 0;
	case KEY_CHECK:
		c->check = 1;
		return 0;
	case FUSE_OPT_KEY_NONOPT:
		if (c->n_positional < 3)
			c->positional[c->n_positional] = pfs_xstrdup(arg);
		c->n_positional++;
		return 0;
	default: /* -o suboptions are the mount's or config fields; dash
		  * options must be known */
		if (arg[0] != '-' && pfs_config_option(arg)) {
			if (c->n_options < sizeof c->options / sizeof *c->options)
				c->options[c->n_options++] = pfs_xstrdup(arg);
			else if (!c->bad_option)
				c->bad_option = pfs_xstrdup(arg);
			return 0;
		}
		if (arg[0] == '-' && !fuse_flag(arg) && !c->bad_option)
			c->bad_option = pfs_xstrdup(arg);
		return 1;
	}
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: profilefs [options] -c CONFIG MOUNTPOINT\n"
		"       profilefs [options] CONFIG MOUNTPOINT     (form used by mount -t fuse.profilefs)\n"
		"       profilefs --check -c CONFIG               (validate, mount nothing)\n"
		"\n"
		"Mounts profiling data as read-only files:\n"
		"  MOUNTPOINT/<cluster>/<service>/latest/<profile>.pb.gz   scraped when opened\n"
		"  MOUNTPOINT/<cluster>/<service>/<time>/<profile>.pb.gz   frozen snapshots\n"
		"profiles: heap allocs goroutine block mutex threadcreate cpu\n"
		"\n"
		"options:\n"
		"  -c, --config=FILE   JSON configuration (also -o config=FILE)\n"
		"  --check             check the configuration (and its *_env secrets), print\n"
		"                      OK or the error, exit 0 or 2; mount nothing\n"
		"  --log-file=FILE     log there (also -o log=FILE); daemonized without syslog\n"
		"                      (/dev/log), logs go to CACHE_DIR/.profilefs.log\n"
		"  --log-level=LEVEL   error, warning, info (default) or debug (also -o log_level=)\n"
		"  -f                  stay in the foreground, log to stderr\n"
		"  -d                  debug: FUSE request trace and debug log lines (implies -f)\n"
		"  -s                  single-threaded FUSE loop (slow targets then block others)\n"
		"  -o OPT[,OPT...]     mount options, e.g. allow_other; and config fields as\n"
		"                      KEY=VALUE over the file's: cache_dir, retention, latest_ttl,\n"
		"                      retry_after, timeout, cpu_seconds, max_profile_bytes,\n"
		"                      max_profile_raw_bytes, max_memory, decode_threads,\n"
		"                      max_connections, max_host_connections\n"
		"  -h, --help          this help\n"
		"  -V, --version       version\n"
		"\n"
		"See profilefs(1) for the configuration format.\n");
}

static void version(void)
{
	const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);

	printf("profilefs %s\nlibfuse %s\nlibcurl %s%s%s\nzlib %s\njansson %s\nprotobuf-c %s\n"
	       "libnats %s\n",
	       PROFILEFS_VERSION, fuse_pkgversion(), cv->version, cv->ssl_version ? " " : "",
	       cv->ssl_version ? cv->ssl_version : "", zlibVersion(), jansson_version_str(),
	       protobuf_c_version(), nats_GetVersion());
}

/* The file descriptors there are: the soft limit raised to the hard one
 * (a login shell's and systemd's default soft limit is 1024). */
static size_t files_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 1024;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t was = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			rl.rlim_cur = was;
	}
	return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 20) ? 1u << 20
									   : (size_t)rl.rlim_cur;
}

/* The session from mount to unmount; 0 on a clean stop (fusermount -u,
 * SIGTERM, SIGINT, SIGHUP). */
static int serve(struct pfs_config *cfg, const char *config_path, struct fuse_args *args,
		 struct fuse_cmdline_opts *opts)
{
	struct fuse_loop_config *loop;
	struct fuse_session *se;
	char fsname[4200];
	int rc = 1;

	/* Always read-only, whatever -o rw the mount helper passes. */
	snprintf(fsname, sizeof fsname, "-ofsname=%s,subtype=profilefs,ro,default_permissions",
		 config_path);
	fuse_opt_add_arg(args, fsname);
	se = fuse_session_new(args, &pfs_fs_ops, sizeof pfs_fs_ops, NULL);
	if (!se)
		return EXIT_USAGE; /* an unknown -o option: libfuse said which */
	pfs_fs_set_session(se);
	if (fuse_session_mount(se, opts->mountpoint))
		goto out_destroy;
	if (fuse_daemonize(opts->foreground))
		goto out_unmount;
	pfs_cache_note_pid();
	pfs_mem_init(cfg->max_memory);
	size_t fds = files_limit();
	if (!cfg->max_connections) /* half the descriptors: the rest are the cache's, FUSE's */
		cfg->max_connections = fds / 2 < 1024 ? (fds / 2 > 8 ? fds / 2 : 8) : 1024;
	else if (cfg->max_connections > fds / 2)
		pfs_warn("max_connections %zu with %zu file descriptors (RLIMIT_NOFILE): fetches may "
			 "fail for want of descriptors; raise the limit (LimitNOFILE=) or lower "
			 "max_connections", cfg->max_connections, fds);
	if (fuse_set_signal_handlers(se) || pfs_work_start((int)cfg->decode_threads) ||
	    pfs_cache_committer_start() ||
	    pfs_fetcher_start(cfg->max_connections, cfg->max_host_connections) || pfs_fs_setup(cfg) || pfs_snap_sweeper_start() ||
	    /* after the fork; a fresh mount shows what discovery found */
	    pfs_discovery_start(cfg, 5) || pfs_upload_start(cfg)) {
		pfs_err("cannot start (signal handlers or threads)");
		goto out_unmount; /* threads started are ended with the process */
	}
	pfs_info("mounted %s on %s (cache %s)", config_path, opts->mountpoint, cfg->cache_dir);

	if (opts->singlethread) {
		rc = fuse_session_loop(se);
	} else {
		loop = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(loop, opts->clone_fd);
		if (opts->max_idle_threads != (unsigned)-1)
			fuse_loop_cfg_set_idle_threads(loop, opts->max_idle_threads);
		/* Requests never wait for fetches on these threads (they are parked),
		 * so a few suffice whatever the number of targets. */
		fuse_loop_cfg_set_max_threads(loop, opts->max_threads);
		rc = fuse_session_loop_mt(se, loop);
		fuse_loop_cfg_destroy(loop);
	}
	/* a positive rc is the signal that ended the loop: a clean stop */
	pfs_info("unmounting %s%s", opts->mountpoint, rc > 0 ? " (signal)" : "");
	rc = rc < 0 ? 1 : 0;
	fuse_remove_signal_handlers(se);
	pfs_fs_set_session(NULL);
	fuse_session_unmount(se);
	pfs_discovery_stop(cfg);
	pfs_snap_sweeper_stop();
	pfs_snap_stop_starts();
	pfs_fetcher_stop(); /* fails what is in flight: their jobs go to the pool */
	pfs_work_stop();    /* which finishes them */
	pfs_cache_committer_stop(); /* and commits what they stored */
	pfs_upload_stop(); /* which it may still upload */
	curl_global_cleanup();
	pfs_fs_teardown();
	goto out_destroy;
out_unmount:
	fuse_session_unmount(se);
out_destroy:
	fuse_session_destroy(se);
	return rc;
}

/* A mount table path: octal escapes (\040 for a space) undone, in place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++)
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	*o = 0;
}

/* A second mount on a mountpoint would hide the first: refused, saying
 * whose it is. -1 with why in err. */
static int mounted_already(const char *mountpoint, char *err, size_t errlen)
{
	char real[PATH_MAX], line[4096];
	FILE *f;
	int rc = 0;

	if (!realpath(mountpoint, real)) {
		if (errno == ENOTCONN) {
			snprintf(err, errlen, "%s: a mount whose daemon is gone is there (%s): "
				 "fusermount3 -u %s first", mountpoint, strerror(errno), mountpoint);
			return -1;
		}
		return 0; /* libfuse says what is wrong with it */
	}
	if (!(f = fopen("/proc/self/mounts", "re")))
		return 0;
	while (!rc && fgets(line, sizeof line, f)) {
		char src[2048], dst[2048], type[256]; /* within the line's 4096 */
		if (sscanf(line, "%2047s %2047s %255s", src, dst, type) != 3)
			continue;
		unescape(src);
		unescape(dst);
		if (strcmp(dst, real) == 0 && strncmp(type, "fuse", 4) == 0) {
			snprintf(err, errlen, "%s is mounted already (%s, type %s): unmount it first "
				 "(fusermount3 -u %s)", mountpoint, src, type, mountpoint);
			rc = -1;
		}
	}
	fclose(f);
	return rc;
}

/* --check: load the configuration as a mount would, mount nothing. */
static int check(struct cli *cli)
{
	struct pfs_config cfg;
	char err[1024];
	const char *path = cli->config;

	if (!path && cli->n_positional == 1)
		path = cli->positional[0];
	if (!path || cli->n_positional > (cli->config ? 0 : 1)) {
		fprintf(stderr, "profilefs: error: --check takes a config and nothing else: "
				"profilefs --check -c CONFIG\n");
		return EXIT_USAGE;
	}
	if (pfs_config_load_with(path, cli->options, cli->n_options, &cfg, err, sizeof err)) {
		fprintf(stderr, "profilefs: error: %s\n", err);
		pfs_config_free(&cfg);
		return EXIT_USAGE;
	}
	size_t services = 0, discovering = 0;
	char disc[64] = "";
	for (size_t i = 0; i < cfg.n_clusters; i++) {
		services += cfg.clusters[i].n_services;
		discovering += cfg.clusters[i].discovery != NULL;
	}
	if (discovering) /* its mechanisms are not asked: that is the mount's job */
		snprintf(disc, sizeof disc, ", %zu discovered", discovering);
	printf("%s: OK (%zu cluster%s, %zu service%s listed%s, cache %s)\n", path, cfg.n_clusters,
	       cfg.n_clusters == 1 ? "" : "s", services, services == 1 ? "" : "s", disc,
	       cfg.cache_dir);
	pfs_config_free(&cfg);
	return 0;
}

/* Where a daemon logs: --log-file, else syslog, else (no /dev/log: a
 * container, a minimal system) a file in the cache, said before detaching. */
static int log_target(struct cli *cli, const struct pfs_config *cfg, bool foreground)
{
	char path[4200];

	if (cli->log_file) {
		if (pfs_log_to_file(cli->log_file)) {
			fprintf(stderr, "profilefs: error: --log-file %s: %s\n", cli->log_file,
				strerror(errno));
			return -1;
		}
		return 0;
	}
	if (foreground)
		return 0;
	if (pfs_log_syslog_there()) {
		pfs_log_use_syslog(); /* once daemonized: see serve() */
		return 0;
	}
	snprintf(path, sizeof path, "%s/.profilefs.log", cfg->cache_dir);
	if (pfs_log_to_file(path)) {
		fprintf(stderr, "profilefs: error: no syslog (/dev/log) and %s: %s; use --log-file\n",
			path, strerror(errno));
		return -1;
	}
	fprintf(stderr, "profilefs: warning: no syslog (/dev/log): logging to %s\n", path);
	return 0;
}

static int run(struct cli *cli, struct fuse_args *args)
{
	struct fuse_cmdline_opts opts = {0};
	struct pfs_config cfg;
	char err[1024];
	int rc;

	if (cli->help) {
		usage(stdout);
		printf("\nFUSE options:\n");
		fuse_cmdline_help();
		fuse_lowlevel_help();
		return 0;
	}
	if (cli->version) {
		version();
		return 0;
	}
	if (cli->bad_option) {
		fprintf(stderr, "profilefs: error: unknown option %s (see --help)\n", cli->bad_option);
		return EXIT_USAGE;
	}
	if (cli->log_level && pfs_log_set_level(cli->log_level)) {
		fprintf(stderr, "profilefs: error: --log-level %s: use error, warning, info or debug\n",
			cli->log_level);
		return EXIT_USAGE;
	}
	if (cli->check)
		return check(cli);
	if (cli->n_positional == 2 && cli->config &&
	    (strcmp(cli->positional[0], "none") == 0 ||
	     strcmp(cli->positional[0], cli->config) == 0)) {
		/* mount -t fuse.profilefs -o config=FILE none MOUNTPOINT */
		free(cli->positional[0]);
		cli->positional[0] = cli->positional[1];
		cli->positional[1] = NULL;
		cli->n_positional = 1;
	}
	if (cli->n_positional == 2 && !cli->config) {
		cli->config = cli->positional[0];
		cli->positional[0] = cli->positional[1];
		cli->positional[1] = NULL;
	} else if (cli->n_positional != 1) {
		fprintf(stderr, "profilefs: error: %s\n",
			cli->n_positional == 0 ? "no mountpoint given (see --help)"
					       : "too many arguments (see --help)");
		return EXIT_USAGE;
	}
	if (!cli->config) {
		fprintf(stderr, "profilefs: error: no config given: use -c CONFIG (see --help)\n");
		return EXIT_USAGE;
	}
	fuse_opt_add_arg(args, cli->positional[0]);
	if (fuse_parse_cmdline(args, &opts) != 0)
		return EXIT_USAGE;
	pfs_log_init(opts.debug);
	if (mounted_already(opts.mountpoint, err, sizeof err)) {
		pfs_err("%s", err);
		free(opts.mountpoint);
		return EXIT_USAGE;
	}
	if (pfs_config_load_with(cli->config, cli->options, cli->n_options, &cfg, err,
				 sizeof err)) {
		pfs_err("%s", err);
		rc = EXIT_USAGE;
	} else if (pfs_snap_init(&cfg, err, sizeof err)) {
		pfs_err("%s", err);
		rc = 1;
	} else if (log_target(cli, &cfg, opts.foreground)) {
		rc = EXIT_USAGE;
	} else {
		wire_hooks();
		rc = serve(&cfg, cli->config, args, &opts);
	}
	pfs_sources_free(); /* first: their threads may still finish jobs */
	pfs_merged_free();
	pfs_snap_free(&cfg);
	pfs_cache_close();
	pfs_config_free(&cfg);
	free(opts.mountpoint);
	return rc;
}

/* The long options that take a value, each as "--opt=value" whether it
 * was given so or as "--opt value" (getopt_long's two forms). Into
 * args, which owns the copies. */
static int long_options(int argc, char *argv[], struct fuse_args *args)
{
	static const char *const with_value[] = {"--config", "--log-file", "--log-level"};

	for (int i = 0; i < argc; i++) {
		bool joined = false;
		for (size_t k = 0; i > 0 && k < sizeof with_value / sizeof *with_value; k++)
			if (strcmp(argv[i], with_value[k]) == 0 && i + 1 < argc) {
				char *kv;
				if (asprintf(&kv, "%s=%s", argv[i], argv[i + 1]) < 0)
					return -1;
				int rc = fuse_opt_add_arg(args, kv);
				free(kv);
				if (rc)
					return -1;
				joined = true;
				i++;
				break;
			}
		if (!joined && fuse_opt_add_arg(args, argv[i]))
			return -1;
		if (!joined && strcmp(argv[i], "--") == 0) { /* the rest as it is */
			while (++i < argc)
				if (fuse_opt_add_arg(args, argv[i]))
					return -1;
		}
	}
	return 0;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct cli cli = {0};
	int rc = EXIT_USAGE;

	if (long_options(argc, argv, &args) == 0 &&
	    fuse_opt_parse(&args, &cli, cli_spec, cli_proc) == 0)
		rc = run(&cli, &args);
	fuse_opt_free_args(&args);
	free(cli.config);
	free(cli.log_file);
	free(cli.log_level);
	free(cli.bad_option);
	for (size_t i = 0; i < cli.n_options; i++)
		free(cli.options[i]);
	for (int i = 0; i < 3; i++)
		free(cli.positional[i]);
	return rc;
}
