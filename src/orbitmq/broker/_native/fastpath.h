/*
 * fastpath.h: the native fast path of the broker's sends (fastpath.c), the C part of
 * broker/fast_path.py.
 *
 * FastPath.take() gets a connection's buffered bytes and takes, in order, every complete frame it
 * can handle entirely: SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE with the V2 (a..n)
 * header names, to a topic of the snapshot the broker gave it (set_topics: existing, writable
 * topics that need nothing of the broker), to a queue in range that the queue-offset table
 * holds (a queue it does not, new or not yet loaded by the store, is the Python path's), with only the properties the broker
 * named inert (set at construction) and nothing the stored codec refuses or routes. Each is encoded
 * with the one encoder (protocol/_native/stored_encode.c) straight into the commit log segment
 * given, its positions patched, the queue-offset table (the CommitLog's own dict) advanced, and its
 * answer appended to one output buffer, byte for byte the answer of the Python path
 * (broker/send_processor.py). It stops at the first frame it declines (anything else, a frame that
 * does not fit the segment, a partial frame) and says where: the caller hands that frame to the
 * Python path and calls again, so every frame is handled once, in order, by one of the two.
 *
 * With authentication on (constructed with ``auth``), a send must also pass fastpath_auth.c's
 * check: signed by an enabled user of the snapshot Python pushes (set_users), and with
 * authorization on, by a Super user or for an allowed (user, topic) pair (allow), checked frame by
 * frame before it is stored. One thread at a time uses a FastPath (the broker's event loop).
 *
 * The caller holds the commit log's put lock and publishes the segment's new write position;
 * broker/fast_path.py is that caller. Every byte of a frame is bounds-checked before it is read.
 */
#ifndef ORBITMQ_BROKER_FASTPATH_H
#define ORBITMQ_BROKER_FASTPATH_H

#include "broker/_native/fastpath_auth.h"
#include "broker/_native/wire_request.h"
#include "protocol/_native/stored_rules.h"

#define USER_SYS_FLAGS 3   /* compressed, multi tags: what a plain send stores */
#define INERT_NAMES_MAX 32
#define SIZE_BOUNDS_MAX 32
#define STOP_PARTIAL 0
#define STOP_DECLINED 1
#define STOP_SEGMENT_FULL 2

typedef struct {
    PyObject *name;  /* the topic as str: the queue-offset table's key */
    unsigned char part[1 + TOPIC_SIZE_MAX];  /* u8 length + topic, as stored */
    Py_ssize_t part_len;
    int32_t write_queue_nums;
} TopicEntry;

typedef struct {
    PyObject_HEAD
    TopicEntry *topics;
    Py_ssize_t topic_count, topic_cap;
    Py_ssize_t *slots;  /* open addressing: index + 1 into topics, 0 free */
    size_t mask;
    unsigned char store_host[HOST_V6_SIZE];
    Py_ssize_t store_host_len;
    char id_prefix[2 * HOST_V6_SIZE];  /* the store host in upper hex: offset message ids */
    Py_ssize_t id_prefix_len;
    Py_ssize_t max_message_size, max_blob_size, max_frame_size, gil_release_bytes;
    Span inert[INERT_NAMES_MAX];
    int inert_count;
    Py_ssize_t size_bounds[SIZE_BOUNDS_MAX];
    int bounds_count;
    PyObject *inert_names;  /* the tuple the inert spans point into */
    unsigned char *scratch;
    Py_ssize_t scratch_cap;
    unsigned long long handled, declined, segment_full, errors;  /* frames, since creation */
    AuthState auth;
    int busy;  /* in take() (which may release the GIL): auth_check waits its turn */
} FastPathObject;

/* -- the topic snapshot ----------------------------------------------------------------------- */

/* -- one take() call's state ------------------------------------------------------------------ */

typedef struct {
    const TopicEntry *topic;
    long long times, msgs, size;
    long long by_size[SIZE_BOUNDS_MAX + 1];
} TopicCount;

typedef struct {
    unsigned char *seg;
    Py_ssize_t seg_len, seg_pos;
    int64_t seg_base, now;
    const unsigned char *born;
    Py_ssize_t born_len;
    PyObject *queue_table;
    char *out;  /* the answers */
    Py_ssize_t out_len, out_cap;
    TopicCount *counts;
    Py_ssize_t count_len, count_cap;
    Py_ssize_t by_code[3];  /* handled requests: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE */
    unsigned char *session;  /* the connection's stateful record (AUTH_SESSION_SIZE) or NULL */
} Take;

/* Makes room for ``more`` bytes of answers; -1 with MemoryError set. */
int out_reserve(Take *t, Py_ssize_t more);

/* The type FastPath (fastpath.c), made ready by the broker room's init. */
extern PyTypeObject FastPathType;

#endif
