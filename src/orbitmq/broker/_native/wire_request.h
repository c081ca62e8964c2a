/*
 * wire_request.h: one remoting frame's request header, read in C for the native fast path
 * (fastpath.c; wire_request.c reads it): the frame layout of orbitmq/protocol/frame.py and
 * command.py, and the send header's a..n fields (headers.SendMessageRequestHeader.V2_NAMES).
 *
 * It reads a strict subset of what the Python decoders accept, and answers "declined" for
 * everything else, so that the Python path keeps deciding what is refused and why: a JSON header
 * must be strict RFC 8259 JSON (what orjson accepts) in valid UTF-8, with code / opaque / flag /
 * version as integers in 32-bit range (or null for the last three), remark null or text, and
 * extFields an object of text values; numbers of over 18 digits, fractions, exponents, escaped
 * surrogates, a nesting deeper than JSON_DEPTH_MAX or a field this reader keeps given twice all
 * decline. A binary (ROCKETMQ) header must be well formed with UTF-8 text. Pure C: no Python object
 * is touched, every read is bounds-checked (the bytes are a peer's).
 */
#ifndef ORBITMQ_BROKER_WIRE_REQUEST_H
#define ORBITMQ_BROKER_WIRE_REQUEST_H

#include <stddef.h>

#include "protocol/_native/stored_rules.h"

#define CODE_SEND_MESSAGE 10
#define CODE_SEND_MESSAGE_V2 310
#define CODE_SEND_BATCH_MESSAGE 320
#define LANGUAGE_PYTHON 3
#define SERIALIZE_JSON 0
#define SERIALIZE_ROCKETMQ 1
#define HEADER_LENGTH_MASK 0xFFFFFF
#define FLAG_RESPONSE 1
#define FLAG_ONEWAY 2
#define JSON_DEPTH_MAX 16
#define JSON_DIGITS_MAX 18
#define SEND_FIELDS 14  /* a..n */
#define EXT_FIELDS_MAX 32  /* extFields kept for a signature's check; more: ext_overflow */

/* The request header fields the fast path reads; a Span's p is NULL when the field is absent. */
typedef struct {
    int32_t code, opaque, flag, version;
    int serialize_type;
    Span send[SEND_FIELDS];  /* the V2 send fields, 'a' at 0 */
    int has_v1_names;        /* "producerGroup" is present: the C++ client's names */
    const unsigned char *body;
    Py_ssize_t body_len;
    int ext_overflow;        /* more than EXT_FIELDS_MAX extFields */
    int ext_count;           /* every extField in header order, for the signature's check */
    Span ext_key[EXT_FIELDS_MAX], ext_value[EXT_FIELDS_MAX];  /* (not cleared: ext_count says) */
} WireRequest;

enum {
    FRAME_READY = 0,  /* a whole frame, read into the request */
    FRAME_PARTIAL,    /* its bytes are not all in yet */
    FRAME_DECLINED,   /* not for the fast path: the Python decoder decides */
};

/* -- the ext fields kept ---------------------------------------------------------------------- */

#define BIN_FIXED 17  /* code i16, language u8, version i16, opaque i32, flag i32, remark len i32 */

/*
 * The frame at ``p`` (``avail`` bytes there): FRAME_PARTIAL, FRAME_DECLINED, or FRAME_READY with
 * ``*frame_size`` (length word included) and ``r`` read. ``scratch`` holds at least ``avail``
 * bytes (unescaped JSON strings).
 */
int read_frame(const unsigned char *p, Py_ssize_t avail, Py_ssize_t max_frame_size,
               unsigned char *scratch, WireRequest *r, Py_ssize_t *frame_size);

/* Decimal digits with an optional '-' (at most 19 characters), in [low, high]: 1 and ``*out``,
 * else 0. Stricter than Python's int(): no sign '+', blank or '_'. */
int span_int(Span s, int64_t low, int64_t high, int64_t *out);

/* An optional number: absent or empty is ``dflt``. */
int span_opt_int(Span s, int64_t dflt, int64_t low, int64_t high, int64_t *out);

#endif
