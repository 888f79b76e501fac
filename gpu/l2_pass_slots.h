/* Private to gpu/: the in-flight slots of the second-stage pass. Each pass a thread runs holds one
 * slot for its whole flight (its stream, pinned host buffers and device buffers on the GPU; its
 * buffers on the emulated device), so that passes of several threads overlap without sharing a
 * buffer, and the buffers are reused from call to call. A thread takes a free slot, waiting while
 * every slot is in flight. Used from C and from CUDA C++. */
#ifndef ISN_GPU_L2_PASS_SLOTS_H
#define ISN_GPU_L2_PASS_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Slots when the caller asks for 0, and the most a pool takes. */
#define L2_PASS_SLOTS_DEFAULT 4u
#define L2_PASS_SLOTS_MAX 64u

typedef struct l2_slot_pool l2_slot_pool;

/* slots (0: the default, above the most: the most) zeroed slots of slot_bytes each. NULL when out of
 * memory. */
l2_slot_pool *l2_slot_pool_new(uint32_t slots, size_t slot_bytes);
/* Frees the pool; the slots' own resources are the caller's to release first (l2_slot_pool_at). */
void l2_slot_pool_free(l2_slot_pool *pool);
uint32_t l2_slot_pool_size(const l2_slot_pool *pool);
void *l2_slot_pool_at(l2_slot_pool *pool, uint32_t i);

/* A free slot, the caller's alone until l2_slot_release; waits while every slot is taken. */
void *l2_slot_acquire(l2_slot_pool *pool);
void l2_slot_release(l2_slot_pool *pool, void *slot);

#ifdef __cplusplus
}
#endif

#endif
