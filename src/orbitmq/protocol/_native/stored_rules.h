/*
 * stored_rules.h: the stored message layout and the rules every reader applies: field offsets
 * named as in orbitmq/protocol/stored/_layout.py, the properties rule of
 * orbitmq/protocol/properties.py, the topic rule, a batch entry's length checks
 * (orbitmq/protocol/batch.py), the checks of a stored message (stored._layout._read) and the
 * RemoteProtocolError each refusal raises, worded as the Python twins word it
 * (stored_rules.c). The byte accessors and the layout's arithmetic below are static inline
 * one-liners (they are on every hot path of every room); everything else is declared here and
 * defined in stored_rules.c.
 *
 * Every byte read is bounds-checked first: the input may be a peer's batch body or a damaged
 * commit log segment.
 */
#ifndef ORBITMQ_PROTOCOL_STORED_RULES_H
#define ORBITMQ_PROTOCOL_STORED_RULES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* orbitmq.errors.RemoteProtocolError, set by the protocol room's init (entry_points.c) */
extern PyObject *remote_protocol_error;

/* -- big-endian helpers ------------------------------------------------------------------- */

static inline int32_t get_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static inline int16_t get_i16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static inline int64_t get_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)(uint32_t)get_i32(p) << 32) | (uint64_t)(uint32_t)get_i32(p + 4));
}

static inline void put_i32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void put_i64(unsigned char *p, int64_t v)
{
    put_i32(p, (int32_t)((uint64_t)v >> 32));
    put_i32(p + 4, (int32_t)(uint64_t)v);
}

/* -- the stored layout (orbitmq/protocol/stored/_layout.py names the same offsets) ---------- */

#define MAGIC_CODE ((int32_t)0xDAA320A7)
#define BLANK_MAGIC_CODE ((int32_t)0xCBD43194)
#define BLANK_ENTRY_SIZE 8
#define TOTALSIZE_AT 0
#define MAGICCODE_AT 4
#define BODYCRC_AT 8
#define QUEUEID_AT 12
#define FLAG_AT 16
#define QUEUEOFFSET_AT 20
#define PHYSICALOFFSET_AT 28
#define SYSFLAG_AT 36
#define BORNTIMESTAMP_AT 40
#define BORNHOST_AT 48
#define HOST_V4_SIZE 8   /* IPv4 address + port */
#define HOST_V6_SIZE 20  /* IPv6 address + port */
#define STORETIMESTAMP_AT_V4 (BORNHOST_AT + HOST_V4_SIZE)
#define STORETIMESTAMP_AT_V6 (BORNHOST_AT + HOST_V6_SIZE)
#define POSITION_FIELDS_END (STORETIMESTAMP_AT_V6 + 8)
/* after STOREHOST (offsets from its end): RECONSUMETIMES i32, PREPAREDTRANSACTIONOFFSET i64,
 * body length i32 */
#define TAIL_RECONSUMETIMES_AT 0
#define TAIL_PREPAREDTRANSACTIONOFFSET_AT 4
#define TAIL_BODY_LENGTH_AT 12
#define HEADER_TAIL_SIZE (4 + 8 + 4)
#define HEADER_SIZE_V4 (BORNHOST_AT + HOST_V4_SIZE + 8 + HOST_V4_SIZE + HEADER_TAIL_SIZE)
#define TAIL_MIN (1 + 1 + 2)  /* topic length, one topic byte, properties length */
#define BODY_TAIL (1 + 2)     /* topic length and properties length */
#define MIN_STORED_SIZE (HEADER_SIZE_V4 + TAIL_MIN)
#define TOPIC_SIZE_MAX 127
#define PROPERTIES_SIZE_MAX 32767

/* sysFlag bits (orbitmq.protocol.message.MessageSysFlag) */
#define SYSFLAG_BORNHOST_V6 16
#define SYSFLAG_STOREHOST_V6 32
#define SYSFLAG_HOST_V6_BITS (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
#define SYSFLAG_TRANSACTION_MASK 12
#define SYSFLAG_TRANSACTION_PREPARED 4
#define SYSFLAG_TRANSACTION_ROLLBACK 12

#define SCAN_BLANK 1
#define SCAN_BAD 2

static inline Py_ssize_t header_size(int32_t sys_flag)
{
    return BORNHOST_AT + ((sys_flag & SYSFLAG_BORNHOST_V6) ? HOST_V6_SIZE : HOST_V4_SIZE) + 8 +
           ((sys_flag & SYSFLAG_STOREHOST_V6) ? HOST_V6_SIZE : HOST_V4_SIZE) + HEADER_TAIL_SIZE;
}

static inline Py_ssize_t store_ts_at(int32_t sys_flag)
{
    return (sys_flag & SYSFLAG_BORNHOST_V6) ? STORETIMESTAMP_AT_V6 : STORETIMESTAMP_AT_V4;
}

static inline int takes_queue_entry(int32_t sys_flag)
{
    int32_t t = sys_flag & SYSFLAG_TRANSACTION_MASK;
    return t != SYSFLAG_TRANSACTION_PREPARED && t != SYSFLAG_TRANSACTION_ROLLBACK;
}

enum {
    PROPS_OK = 0,
    PROPS_NOT_UTF8,
    PROPS_NUL,
    PROPS_NO_SEPARATOR,
    PROPS_EMPTY_NAME,
    PROPS_SECOND_SEPARATOR,
    PROPS_REPEATED,
    PROPS_NO_MEMORY,
};

typedef struct {
    const unsigned char *p;  /* NULL: absent */
    Py_ssize_t len;
} Span;

/* The values of the properties the broker reads without a dict. */
typedef struct {
    Span tags, keys, uniq, delay, tran_msg;
} PropsFound;

/* -- batch body (orbitmq/protocol/batch.py) -> stored messages ------------------------------ */

#define BATCH_TOTAL_AT 0
#define BATCH_FLAG_AT 12
#define BATCH_BODY_LEN_AT 16
#define BATCH_BODY_AT 20
#define BATCH_ENTRY_OVERHEAD 22  /* total, magic, crc, flag, body length (i32 each) + i16 */

/* One entry of a batch body whose lengths were checked. */
typedef struct {
    Py_ssize_t pos, body_len, props_len;
    int32_t flag;
    const unsigned char *body, *props;
} BatchEntry;

typedef struct {
    Py_ssize_t total;
    int32_t sys_flag;
    const unsigned char *topic;
    Py_ssize_t topic_len;
    PropsFound found;
} StoredRead;

/* Strict UTF-8, as Python's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
int utf8_valid(const unsigned char *s, Py_ssize_t n);
/* FNV-1a of a name: the hash of every small open-addressing table of names. */
uint32_t name_hash(const unsigned char *s, Py_ssize_t n);
/* Checks ``p[0:n]`` against the properties rule, in the rule's order; fills ``found`` and, on a
 * problem with an item, ``*item_no`` (1-based). Returns PROPS_OK or the problem. */
int props_check(const unsigned char *p, Py_ssize_t n, PropsFound *found, Py_ssize_t *item_no);
/* RemoteProtocolError with the message the stored package gives (prefixed for a batch entry at
 * ``entry_pos`` >= 0); ``reason`` is stolen (NULL: an error is already set). */
void raise_protocol(PyObject *reason, Py_ssize_t entry_pos);
void raise_props(int problem, Py_ssize_t item_no, Py_ssize_t entry_pos);
void raise_props_size(Py_ssize_t size, Py_ssize_t entry_pos);
/* The entry of a batch body at ``pos``, its lengths checked before (entry_problem). */
void read_entry(const unsigned char *b, Py_ssize_t pos, BatchEntry *e);
/* stored._layout._topic_problem: 1..127 bytes of UTF-8 that can name a queue directory. */
int topic_ok(const unsigned char *t, Py_ssize_t n);
/* stored._layout._read, the same checks in the same order: 1 when the bytes at ``m`` (``avail``
 * of them up to the limit) are a stored message, 0 when not, -1 on a memory error. */
int read_stored(const unsigned char *m, Py_ssize_t avail, StoredRead *r);

#endif
