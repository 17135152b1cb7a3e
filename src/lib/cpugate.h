/* One cpu profile per process at a time. A Go program takes one cpu
 * profile at once: net/http/pprof answers a second /debug/pprof/profile
 * 500 "Could not enable CPU profiling: cpu profiling already in use", and
 * NATS PROFILEZ "Failed to start CPU profile: cpu profiling already in
 * use". So cpu fetches are keyed by the process they profile (a pprof
 * target's host:port, a NATS server's id) and fetches of one key run one
 * after another, in the order they came.
 *
 * Not thread-safe: the caller serializes every call (snap.lock). */
#ifndef PFS_CPUGATE_H
#define PFS_CPUGATE_H

#include <stdbool.h>

/* job asks for key's profiler, for at most `seconds`. True: it holds it
 * now, start it. False: it is queued behind the holder (and whoever queued
 * before it). */
bool pfs_cpugate_enter(const char *key, void *job, double seconds);
/* The holder of key is done: the first queued job holds it now and is
 * returned (start it), or NULL and the key is free. */
void *pfs_cpugate_leave(const char *key);
/* How long from now until every fetch of key in flight or queued is done
 * at the latest (0 if none): what a reader of one more of them waits. */
double pfs_cpugate_backlog(const char *key);

#endif
