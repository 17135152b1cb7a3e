/* profilefs: command line, mount, and the FUSE loop. */
#include "config.h"
#include "fetch.h"
#include "fs.h"
#include "log.h"
#include "snap.h"

#include <curl/curl.h>
#include <fuse.h>
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

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts;
	struct pfs_config cfg;
	struct cli cli = {0};
	struct fuse_loop_config *loop;
	struct fuse *fuse;
	char err[1024], fsname[4200];
	int rc;

	if (fuse_opt_parse(&args, &cli, cli_spec, cli_proc))
		return EXIT_USAGE;
	if (cli.help) {
		usage(stdout);
		printf("\nFUSE options:\n");
		fuse_cmdline_help();
		fuse_lib_help(&args);
		return 0;
	}
	if (cli.version) {
		version();
		return 0;
	}
	if (cli.n_positional == 2 && !cli.config) {
		cli.config = cli.positional[0];
		cli.positional[0] = cli.positional[1];
	} else if (cli.n_positional != 1) {
		fprintf(stderr, "profilefs: error: %s\n",
			cli.n_positional == 0 ? "no mountpoint given (see --help)"
					      : "too many arguments (see --help)");
		return EXIT_USAGE;
	}
	if (!cli.config) {
		fprintf(stderr, "profilefs: error: no config given: use -c CONFIG (see --help)\n");
		return EXIT_USAGE;
	}
	fuse_opt_add_arg(&args, cli.positional[0]);
	if (fuse_parse_cmdline(&args, &opts) != 0)
		return EXIT_USAGE;
	pfs_log_init(opts.debug);

	if (pfs_config_load(cli.config, &cfg, err, sizeof err)) {
		pfs_err("%s", err);
		return EXIT_USAGE;
	}
	if (pfs_snap_init(&cfg, err, sizeof err)) {
		pfs_err("%s", err);
		return 1;
	}
	pfs_fs_setup(&cfg);

	/* Always read-only, whatever -o rw the mount helper passes. */
	snprintf(fsname, sizeof fsname, "-ofsname=%s,subtype=profilefs,ro,default_permissions",
		 cli.config);
	fuse_opt_add_arg(&args, fsname);
	fuse = fuse_new(&args, &pfs_fs_ops, sizeof pfs_fs_ops, NULL);
	if (!fuse)
		return 1;
	if (fuse_mount(fuse, opts.mountpoint)) {
		fuse_destroy(fuse);
		return 1;
	}
	if (fuse_daemonize(opts.foreground)) {
		fuse_unmount(fuse);
		fuse_destroy(fuse);
		return 1;
	}
	if (!opts.foreground)
		pfs_log_use_syslog();
	if (fuse_set_signal_handlers(fuse_get_session(fuse)) || pfs_fetcher_start()) {
		pfs_err("cannot start (signal handlers or fetcher)");
		fuse_unmount(fuse);
		fuse_destroy(fuse);
		return 1;
	}
	pfs_info("mounted %s on %s (cache %s)", cli.config, opts.mountpoint, cfg.cache_dir);

	if (opts.singlethread) {
		rc = fuse_loop(fuse);
	} else {
		loop = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(loop, opts.clone_fd);
		if (opts.max_idle_threads != (unsigned)-1)
			fuse_loop_cfg_set_idle_threads(loop, opts.max_idle_threads);
		/* Each request waiting on a slow target holds a thread. */
		fuse_loop_cfg_set_max_threads(loop, opts.max_threads >= 64 && opts.max_threads <= 100000
							    ? opts.max_threads : 64);
		rc = fuse_loop_mt(fuse, loop);
		fuse_loop_cfg_destroy(loop);
	}
	fuse_remove_signal_handlers(fuse_get_session(fuse));
	fuse_unmount(fuse);
	pfs_fetcher_stop();
	fuse_destroy(fuse);
	pfs_config_free(&cfg);
	fuse_opt_free_args(&args);
	free(opts.mountpoint);
	return rc ? 1 : 0;
}
