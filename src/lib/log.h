/* Logging: one line per event, to stderr in the foreground, to syslog once
 * daemonized, or to a log file (--log-file; also where there is no syslog). */
#ifndef PFS_LOG_H
#define PFS_LOG_H

#include <stdbool.h>

enum pfs_log_level { PFS_LOG_ERR, PFS_LOG_WARN, PFS_LOG_INFO, PFS_LOG_DEBUG };

void pfs_log_init(int debug);
/* "error", "warning", "info" (the default) or "debug": what is logged;
 * -1 for another name. */
int pfs_log_set_level(const char *name);
/* Log to this file (appended, lines with their UTC time) instead of stderr
 * or syslog; -1 with errno if it cannot be opened. */
int pfs_log_to_file(const char *path);
/* True if syslog's socket /dev/log is there to write to. */
bool pfs_log_syslog_there(void);
/* Switch to syslog (after daemonizing without -f). */
void pfs_log_use_syslog(void);
void pfs_log(enum pfs_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define pfs_err(...) pfs_log(PFS_LOG_ERR, __VA_ARGS__)
#define pfs_warn(...) pfs_log(PFS_LOG_WARN, __VA_ARGS__)
#define pfs_info(...) pfs_log(PFS_LOG_INFO, __VA_ARGS__)
#define pfs_debug(...) pfs_log(PFS_LOG_DEBUG, __VA_ARGS__)

#endif
