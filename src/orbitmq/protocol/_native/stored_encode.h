/*
 * stored_encode.h: the one C encoder of the stored message form (stored_encode.c): the twins
 * encode_wire_single / encode_wire_batch and the native fast path (broker/_native/fastpath.c) both
 * write messages through write_stored() after the checks below, so the bytes a message gets do not
 * depend on the road it took. Pure C: nothing here touches a Python object, so the fast path can
 * run it without the GIL and the fuzz harness without Python.
 *
 * The checks are the rules of stored_rules.h in the order of the Python twins
 * (stored._encode.encode_wire_single_py / encode_wire_batch_py); each returns a problem code and
 * its details, and the twins' Python wrappers turn them into the same RemoteProtocolError messages
 * as before.
 */
#ifndef ORBITMQ_PROTOCOL_STORED_ENCODE_H
#define ORBITMQ_PROTOCOL_STORED_ENCODE_H

#include "protocol/_native/stored_rules.h"

/* -- CRC-32 (zlib's): libz's own function when it can be loaded, else a table ---------------- */

typedef unsigned long (*zlib_crc32_fn)(unsigned long, const unsigned char *, unsigned int);
extern zlib_crc32_fn crc32_zlib;  /* NULL: the table (crc32_init) */
extern int crc32_clmul_ok;        /* crc32_pick: the carry-less path is used */

/* Loads libz's crc32 (the one Python's zlib module wraps); the slice-by-8 table otherwise. */
void crc32_init(void);
/* Picks the carry-less path when the CPU has it and it agrees with the table on a probe. */
void crc32_pick(void);
/* zlib.crc32(p[0:n]) */
uint32_t crc32_of(const unsigned char *p, Py_ssize_t n);

/* -- what every message of one encoder call shares ------------------------------------------ */

typedef struct {
    const unsigned char *topic, *born, *store;  /* u8 length + topic; packed ip + i32 port */
    Py_ssize_t topic_len, born_len, store_len;
    int32_t queue_id, sys_flag, reconsume;
    int64_t born_ts;
} StoreContext;

enum { CONTEXT_OK = 0, CONTEXT_BAD_TOPIC, CONTEXT_BAD_HOST };

/* stored._encode._check_context: whether the parts are well formed (no caller should pass bad
 * ones); on success sets the host kind bits of the sysFlag from the hosts. */
int context_check(StoreContext *c);
Py_ssize_t stored_size(const StoreContext *c, Py_ssize_t body_len, Py_ssize_t props_len);
/* One message in stored form at ``w`` (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and
 * PREPAREDTRANSACTIONOFFSET zero), its properties followed by a final separator when
 * ``add_separator``; returns its size. ``w`` has room for it (stored_size). */
Py_ssize_t write_stored(unsigned char *w, const StoreContext *c, int32_t flag,
                        const unsigned char *body, Py_ssize_t body_len,
                        const unsigned char *props, Py_ssize_t props_len, int add_separator);
/* stored.patch_positions for one message at ``m`` (physical offset ``phy``); returns the next
 * queue offset. */
int64_t patch_one(unsigned char *m, int64_t phy, int64_t qoff, int64_t now);

/* -- one message from its wire properties (encode_wire_single's checks) ---------------------- */

enum {
    SINGLE_OK = 0,
    SINGLE_ROUTED,       /* DELAY or TRAN_MSG: the broker must act on it (the general path) */
    SINGLE_PROPS_SIZE,   /* detail: the size found */
    SINGLE_PROPS_RULE,   /* problem and item_no: see props_check */
};

typedef struct {
    int status, problem;
    Py_ssize_t detail, item_no;
    int add_separator;
    PropsFound found;
} SinglePlan;

/* The checks of encode_wire_single_py, in its order. */
void single_plan(const unsigned char *p, Py_ssize_t n, SinglePlan *plan);

/* -- a batch body (orbitmq/protocol/batch.py; encode_wire_batch's checks) -------------------- */

enum {
    BATCH_OK = 0,
    BATCH_ROUTED,           /* an entry holds DELAY or TRAN_MSG */
    BATCH_ENTRY_TRUNCATED,  /* at pos: detail = bytes left */
    BATCH_BAD_BODY_LENGTH,  /* at pos: detail = the length */
    BATCH_BAD_PROPS_LENGTH, /* at pos */
    BATCH_TOTAL_DISAGREES,  /* at pos: detail = the total */
    BATCH_PROPS_RULE,       /* at pos: problem and item_no */
    BATCH_EMPTY,
    BATCH_BODY_TOO_BIG,     /* at pos: detail = the body length */
    BATCH_PROPS_SIZE,       /* at pos: detail = the size with its separator */
    BATCH_BLOB_TOO_BIG,
};

typedef struct {
    int status, problem;
    Py_ssize_t pos, detail, item_no;
    Py_ssize_t count, out_size;
    Py_ssize_t without_uniq;  /* entries with no UNIQ_KEY, or an empty one */
} BatchPlan;

/* The checks of encode_wire_batch_py in its order, and the stored size of the batch. With
 * ``check_props`` (may be NULL) every entry's properties must also pass it (the fast path's
 * allow-list: BATCH_ROUTED when one does not). */
void batch_plan(const unsigned char *b, Py_ssize_t end, const StoreContext *c,
                Py_ssize_t max_message_size, Py_ssize_t max_blob_size,
                int (*check_props)(const void *, const unsigned char *, Py_ssize_t),
                const void *check_arg, BatchPlan *plan);
/* Pass 3 of a planned batch: every entry in stored form at ``o``, back to back; ``rels`` (may
 * be NULL) gets where each starts. Returns the bytes written (the plan's out_size). */
Py_ssize_t batch_write(unsigned char *o, const unsigned char *b, Py_ssize_t end,
                       const StoreContext *c, Py_ssize_t *rels);

#endif
