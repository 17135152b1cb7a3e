/* profilefs: command line, mount, and the FUSE loop. */
#include "config.h"
#include "fetch.h"
#include "fs.h"
#include "log.h"
#include "snap.h"

#include "cache.h"
#include "mem.h"
#include "work.h"

#include <curl/curl.h>
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define EXIT_USAGE 2

struct cli {
	char *config;
	char *positional[3];
	int n_positional;
	int help;
	int version;
};

enum { KEY_HELP, KEY_VERSION };

static const struct fuse_opt cli_spec[] = {
	{"-c %s", offsetof(struct cli, config), 0},
	{"--config=%s", offsetof(struct cli, config), 0},
	{"config=%s", offsetof(struct cli, config), 0},
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_END,
};

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
	case FUSE_OPT_KEY_NONOPT:
		if (c->n_positional < 3)
			c->positional[c->n_positional] = strdup(arg);
		c->n_positional++;
		return 0;
	default:
		return 1;
	}
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: profilefs [options] -c CONFIG MOUNTPOINT\n"
		"       profilefs [options] CONFIG MOUNTPOINT     (form used by mount -t fuse.profilefs)\n"
		"\n"
		"Mounts profiling data as read-only files:\n"
		"  MOUNTPOINT/<cluster>/<service>/latest/<profile>.pb.gz   scraped when opened\n"
		"  MOUNTPOINT/<cluster>/<service>/<time>/<profile>.pb.gz   frozen snapshots\n"
		"profiles: heap allocs goroutine block mutex threadcreate cpu\n"
		"\n"
		"options:\n"
		"  -c, --config=FILE   JSON configuration (also -o config=FILE)\n"
		"  -f                  stay in the foreground, log to stderr\n"
		"  -d                  debug: FUSE request trace and debug log lines (implies -f)\n"
		"  -s                  single-threaded FUSE loop (slow targets then block others)\n"
		"  -o OPT[,OPT...]     mount options, e.g. allow_other\n"
		"  -h, --help          this help\n"
		"  -V, --version       version\n"
		"\n"
		"See profilefs(1) for the configuration format.\n");
}

static void version(void)
{
	printf("profilefs %s (libfuse %s, %s, zlib %s)\n", PROFILEFS_VERSION, fuse_pkgversion(),
	       curl_version(), zlibVersion());
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
	if (!opts->foreground)
		pfs_log_use_syslog();
	pfs_cache_note_pid();
	pfs_mem_init(cfg->max_memory);
	if (fuse_set_signal_handlers(se) || pfs_work_start((int)cfg->decode_threads) ||
	    pfs_cache_committer_start() ||
	    pfs_fetcher_start(cfg->max_connections, cfg->max_host_connections) || pfs_fs_setup(cfg) || pfs_snap_sweeper_start()) {
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
	pfs_snap_sweeper_stop();
	pfs_snap_stop_starts();
	pfs_fetcher_stop(); /* fails what is in flight: their jobs go to the pool */
	pfs_work_stop();    /* which finishes them */
	pfs_cache_committer_stop(); /* and commits what they stored */
	pfs_fs_teardown();
	goto out_destroy;
out_unmount:
	fuse_session_unmount(se);
out_destroy:
	fuse_session_destroy(se);
	return rc;
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
	if (pfs_config_load(cli->config, &cfg, err, sizeof err)) {
		pfs_err("%s", err);
		rc = EXIT_USAGE;
	} else if (pfs_snap_init(&cfg, err, sizeof err)) {
		pfs_err("%s", err);
		rc = 1;
	} else {
		rc = serve(&cfg, cli->config, args, &opts);
	}
	pfs_snap_free(&cfg);
	pfs_cache_close();
	pfs_config_free(&cfg);
	free(opts.mountpoint);
	return rc;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct cli cli = {0};
	int rc = EXIT_USAGE;

	if (fuse_opt_parse(&args, &cli, cli_spec, cli_proc) == 0)
		rc = run(&cli, &args);
	fuse_opt_free_args(&args);
	free(cli.config);
	for (int i = 0; i < 3; i++)
		free(cli.positional[i]);
	return rc;
}
