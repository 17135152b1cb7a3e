/* The memory budget: one total (config max_memory) for what fetches and
 * decoding hold at once: response bodies, inflated profiles and decoded
 * profile.proto messages. A fetch or decode that would go over it fails
 * with a reason instead of growing the daemon without bound. */
#ifndef PFS_MEM_H
#define PFS_MEM_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

void pfs_mem_init(size_t max);
/* Reserve n bytes of the budget; false (nothing reserved) if it is spent. */
bool pfs_mem_take(size_t n);
void pfs_mem_give(size_t n);
size_t pfs_mem_used(void);
size_t pfs_mem_max(void);
/* A protobuf-c allocator that charges the budget. */
extern ProtobufCAllocator pfs_mem_pb;

#endif
