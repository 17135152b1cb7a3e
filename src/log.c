/* Logging: stderr or syslog, one whole line per call. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>

static int g_debug;
static int g_syslog;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void pfs_log_init(int debug) { g_debug = debug; }

void pfs_log_use_syslog(void)
{
	openlog("profilefs", LOG_PID, LOG_DAEMON);
	g_syslog = 1;
}

void pfs_log(enum pfs_log_level lvl, const char *fmt, ...)
{
	static const char *const tag[] = {"error", "warning", "info", "debug"};
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char line[2048];
	va_list ap;

	if (lvl == PFS_LOG_DEBUG && !g_debug)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	for (char *c = line; *c; c++) /* upstream text never breaks the line */
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	if (g_syslog) {
		syslog(prio[lvl], "%s", line);
		return;
	}
	pthread_mutex_lock(&g_lock);
	fprintf(stderr, "profilefs: %s: %s\n", tag[lvl], line);
	fflush(stderr);
	pthread_mutex_unlock(&g_lock);
}
