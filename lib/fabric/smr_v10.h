/*
 * What ferry reads and writes of libfabric 2.6's shm commands: the stack
 * an endpoint takes the commands it posts from, the queue its peers hand
 * them back through, and a command's header (prov/shm/src/smr_util.h,
 * include/ofi_mem.h, include/ofi_atomic_queue.h).  2.6's regions carry
 * SMR_VERSION 10 as 2.5.1's do, whose commands have another layout: the
 * release, not the region, says which.  These are the provider's own
 * structures, not an interface: shm_returns.c checks their sizes and
 * offsets against the region before it believes them.
 */
#ifndef FERRY_FABRIC_SMR_V10_H
#define FERRY_FABRIC_SMR_V10_H

#include <stddef.h>
#include <stdint.h>

/* Among the region's offsets (smr_v9.h): the command stack's, the return
 * queue's and the SAR pool's, which follows the queue. */
#define FERRY__SMR26_STACK_INDEX 2
#define FERRY__SMR26_RETURNS_INDEX 3
#define FERRY__SMR26_SAR_INDEX 4

/* A command, SMR_CMD_SIZE bytes. */
#define FERRY__SMR26_CMD_SIZE 368

/* The command stack (struct smr_freestack): size commands from
 * entry_base_offset (from the stack's start) on, and the free ones
 * linked from top through next, -1 ending the list.  Only its owner's
 * posts and progress touch it. */
struct ferry__smr26_stack {
    uint64_t entry_base_offset;
    uint64_t object_size;
    uint64_t size;
    int16_t free;
    int16_t top;
    int16_t next[];
};

/* The return queue (OFI_DECLARE_ATOMIC_Q of struct smr_return_entry):
 * a ring of size entries, each with a sequence word, claimed by
 * compare-and-swap on write_pos by any producer, and read in order by
 * the owner's progress.  An ofi_atomic64_t has a second word in a
 * libfabric built for debugging: write_pos's is in pad0, the entry's
 * pushes its fields on by 8 bytes. */
struct ferry__smr26_returns {
    int64_t write_pos;
    int32_t write_pos_initialized; /* 1 in a debug build, else padding */
    uint8_t pad0[52];
    int64_t read_pos;
    uint64_t init_fn;
    uint8_t pad1[48];
    int32_t size;
    int32_t size_mask;
    uint8_t pad2[56];
    uint8_t entries[]; /* FERRY__SMR26_RETURN_ENTRY bytes each */
};
#define FERRY__SMR26_RETURN_ENTRY 64
/* Where an entry keeps the command's address (in its owner's mapping):
 * after the sequence word and the noop flag. */
#define FERRY__SMR26_RETURN_PTR 16
#define FERRY__SMR26_RETURN_PTR_DEBUG 24

/* A command's header (struct smr_cmd_hdr): the ids are the owner's for
 * the peer (tx_id) and the peer's for the owner (rx_id). */
struct ferry__smr26_cmd_hdr {
    uint64_t entry;
    uint8_t op;
    uint8_t proto;
    uint8_t smr_flags;
    uint8_t resv;
    int16_t rx_id;
    int16_t tx_id;
    uint64_t size;
    uint64_t cq_data;
    uint64_t tag;
    uint64_t proto_data;
    uint64_t tx_ctx;
    uint64_t rx_ctx;
};

/* smr_proto_*: through an inject buffer of the peer's, or copied by the
 * peer between the processes (process_vm_readv). */
#define FERRY__SMR26_PROTO_INJECT 1
#define FERRY__SMR26_PROTO_IOV 2
/* smr_flags: the operation failed. */
#define FERRY__SMR26_OP_ERROR (1u << 2)
/* ofi_op_*, include/ofi_proto.h: the operations whose inject buffer the
 * provider copies into the caller's buffer when the command comes back. */
#define FERRY__OFI_OP_READ_REQ 2
#define FERRY__OFI_OP_ATOMIC_FETCH 7
#define FERRY__OFI_OP_ATOMIC_COMPARE 8

#endif /* FERRY_FABRIC_SMR_V10_H */
