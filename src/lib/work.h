/* Worker pool: the CPU and disk work of a finished fetch (decode, gunzip,
 * validate, write to the cache) runs here, never on the fetcher thread,
 * so one heavy profile does not hold up every other transfer. */
#ifndef PFS_WORK_H
#define PFS_WORK_H

int pfs_work_start(int threads);
/* Runs what is queued, then stops the threads. */
void pfs_work_stop(void);
void pfs_work_submit(void (*fn)(void *arg), void *arg);

#endif
