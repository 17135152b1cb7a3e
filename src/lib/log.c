/* Logging: stderr, a file or syslog, one whole line per call. */
#include "log.h"

#include "names.h"
#include "secrets.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static const char *const g_names[] = {"error", "warning", "info", "debug"};
static enum pfs_log_level g_level = PFS_LOG_INFO;
static int g_syslog;
static FILE *g_file; /* a log file: lines carry their time */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void pfs_log_init(int debug)
{
	if (debug)
		g_level = PFS_LOG_DEBUG;
}

int pfs_log_set_level(const char *name)
{
	for (int l = PFS_LOG_ERR; l <= PFS_LOG_DEBUG; l++)
		if (strcmp(name, g_names[l]) == 0) {
			g_level = (enum pfs_log_level)l;
			return 0;
		}
	return -1;
}

int pfs_log_to_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "a");

	if (!f) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setvbuf(f, NULL, _IOLBF, 0);
	g_file = f;
	return 0;
}

bool pfs_log_syslog_there(void)
{
	return access("/dev/log", W_OK) == 0;
}

void pfs_log_use_syslog(void)
{
	openlog("profilefs", LOG_PID, LOG_DAEMON);
	g_syslog = 1;
}

void pfs_log(enum pfs_log_level lvl, const char *fmt, ...)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char line[2048];
	va_list ap;

	if (lvl > g_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	pfs_secret_mask(line); /* whatever text it quotes */
	va_end(ap);
	for (char *c = line; *c; c++) /* upstream text never breaks the line */
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	if (g_syslog && !g_file) {
		syslog(prio[lvl], "%s", line);
		return;
	}
	pthread_mutex_lock(&g_lock);
	if (g_file) {
		char when[PFS_TIME_NAME_MAX];
		pfs_name_time(time(NULL), when);
		fprintf(g_file, "%s profilefs[%d]: %s: %s\n", when, (int)getpid(), g_names[lvl], line);
	} else {
		fprintf(stderr, "profilefs: %s: %s\n", g_names[lvl], line);
		fflush(stderr);
	}
	pthread_mutex_unlock(&g_lock);
}
