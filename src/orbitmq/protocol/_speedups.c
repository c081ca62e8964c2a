/*
 * orbitmq.protocol._speedups: the broker's per-message byte work, in C.
 *
 * Optional: the C twin of the hot functions of orbitmq/protocol/stored.py (encode_wire_single,
 * encode_wire_batch, patch_positions, scan_stored) and of protocol/java_hash.py. Every function
 * takes the same arguments as its Python twin (``*_py`` in stored.py) and gives the same bytes,
 * the same None and the same refusals (RemoteProtocolError with the same message, ValueError,
 * OverflowError); tests/unit/test_stored_twins.py checks it. The build hook (hatch_build.py)
 * compiles this file when a C compiler is present; without it, or with ORBITMQ_PURE_PYTHON=1,
 * OrbitMQ runs the Python twins.
 *
 * Every byte read from a buffer is bounds-checked first: the input may be a peer's batch body or a
 * damaged commit log segment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *zlib_crc32;  /* zlib.crc32, so that no zlib headers are needed to build */
static PyObject *remote_protocol_error;  /* orbitmq.errors.RemoteProtocolError */

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

/* -- Java's String.hashCode over UTF-16 code units ------------------------------------------ */

/* h * 31^n + (the units of s), over UTF-16 code units with 32-bit wraparound */
static uint32_t java_hash_continue(uint32_t h, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x10000) {
            h = h * 31u + (uint32_t)c;
        } else {  /* a surrogate pair, as Java stores it */
            c -= 0x10000;
            h = h * 31u + (uint32_t)(0xD800 + (c >> 10));
            h = h * 31u + (uint32_t)(0xDC00 + (c & 0x3FF));
        }
    }
    return h;
}

static int32_t java_hash_unicode(PyObject *s)
{
    return (int32_t)java_hash_continue(0, s);
}

static PyObject *py_java_string_hash(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "java_string_hash takes a str");
        return NULL;
    }
    return PyLong_FromLong(java_hash_unicode(arg));
}

/* abs(hashCode("topic#key")), 0 for Integer.MIN_VALUE: the IndexFile's key hash */
static PyObject *py_index_key_hash(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "index_key_hash(topic: str, key: str)");
        return NULL;
    }
    uint32_t h = java_hash_continue(0, args[0]) * 31u + (uint32_t)'#';
    int32_t v = (int32_t)java_hash_continue(h, args[1]);
    if (v == INT32_MIN)
        return PyLong_FromLong(0);
    return PyLong_FromLong(v < 0 ? -(long)v : (long)v);
}

/* -- the stored layout (orbitmq/protocol/stored.py names the same offsets) ------------------- */

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

/* -- properties: the rule of orbitmq/protocol/properties.py ----------------------------------- */

/* Strict UTF-8, as Python's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            while (i + 8 <= n) {  /* ASCII, 8 bytes at a time */
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull)
                    break;
                i += 8;
            }
            continue;
        }
        Py_ssize_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (i + need > n - 1)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (Py_ssize_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return 0;
        i += need + 1;
    }
    return 1;
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

typedef struct {
    const unsigned char *name;  /* NULL: free slot */
    Py_ssize_t len;
} NameSlot;

static uint32_t name_hash(const unsigned char *s, Py_ssize_t n)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

/*
 * The names met so far, to refuse one given twice: a short list compared one by one (nearly
 * every message has a handful of properties), then an open-addressing table once the list is
 * full, so that a peer's 10,000 names cost linear time. The table holds at most
 * (n + 1) / 3 names for a blob of n bytes (a well-formed item takes at least 3 bytes with its
 * separator) in twice as many slots, so it never fills.
 */
#define NAMES_LISTED 16
#define NAME_SLOTS_SMALL 64

typedef struct {
    NameSlot list[NAMES_LISTED];
    int listed;
    NameSlot *slots;  /* NULL until the list is full */
    size_t mask;
    Py_ssize_t blob_len;
    NameSlot small[NAME_SLOTS_SMALL];
} NameSet;

static int table_seen(NameSet *set, const unsigned char *name, Py_ssize_t len)
{
    size_t i = name_hash(name, len) & set->mask;
    while (set->slots[i].name != NULL) {
        if (set->slots[i].len == len && memcmp(set->slots[i].name, name, (size_t)len) == 0)
            return 1;
        i = (i + 1) & set->mask;
    }
    set->slots[i].name = name;
    set->slots[i].len = len;
    return 0;
}

/* 1 when the name was met before, 0 when new (now recorded), -1 when out of memory. */
static int name_seen(NameSet *set, const unsigned char *name, Py_ssize_t len)
{
    if (set->slots == NULL) {
        for (int k = 0; k < set->listed; k++)
            if (set->list[k].len == len && memcmp(set->list[k].name, name, (size_t)len) == 0)
                return 1;
        if (set->listed < NAMES_LISTED) {
            set->list[set->listed].name = name;
            set->list[set->listed].len = len;
            set->listed++;
            return 0;
        }
        size_t want = 2 * (size_t)((set->blob_len + 1) / 3 + 1), cap = NAME_SLOTS_SMALL;
        while (cap < want)
            cap <<= 1;
        if (cap > NAME_SLOTS_SMALL) {
            set->slots = PyMem_Calloc(cap, sizeof(NameSlot));
            if (set->slots == NULL)
                return -1;
        } else {
            memset(set->small, 0, sizeof set->small);
            set->slots = set->small;
        }
        set->mask = cap - 1;
        for (int k = 0; k < set->listed; k++)
            table_seen(set, set->list[k].name, set->list[k].len);
    }
    return table_seen(set, name, len);
}

static void names_free(NameSet *set)
{
    if (set->slots != NULL && set->slots != set->small)
        PyMem_Free(set->slots);
}

static void note_found(PropsFound *f, const unsigned char *name, Py_ssize_t name_len,
                       const unsigned char *value, Py_ssize_t value_len)
{
    Span *to = NULL;
    if (name_len == 4 && memcmp(name, "TAGS", 4) == 0)
        to = &f->tags;
    else if (name_len == 4 && memcmp(name, "KEYS", 4) == 0)
        to = &f->keys;
    else if (name_len == 8 && memcmp(name, "UNIQ_KEY", 8) == 0)
        to = &f->uniq;
    else if (name_len == 5 && memcmp(name, "DELAY", 5) == 0)
        to = &f->delay;
    else if (name_len == 8 && memcmp(name, "TRAN_MSG", 8) == 0)
        to = &f->tran_msg;
    if (to != NULL) {
        to->p = value;
        to->len = value_len;
    }
}

/*
 * Checks ``p[0:n]`` against the properties rule, in the rule's order; fills ``found`` and, on a
 * problem with an item, ``*item_no`` (1-based). Returns PROPS_OK or the problem.
 */
static int props_check(const unsigned char *p, Py_ssize_t n, PropsFound *found,
                       Py_ssize_t *item_no)
{
    memset(found, 0, sizeof *found);
    *item_no = 0;
    if (n == 0)
        return PROPS_OK;
    if (!utf8_valid(p, n))
        return PROPS_NOT_UTF8;
    if (memchr(p, 0, (size_t)n) != NULL)
        return PROPS_NUL;
    Py_ssize_t end = p[n - 1] == 0x02 ? n - 1 : n;  /* without the final separator */
    NameSet names;
    names.listed = 0;
    names.slots = NULL;
    names.blob_len = n;
    int result = PROPS_OK;
    Py_ssize_t i = 0, no = 0;
    for (;;) {
        no++;
        const unsigned char *item = p + i;
        const unsigned char *stop = memchr(item, 0x02, (size_t)(end - i));
        Py_ssize_t item_len = stop != NULL ? stop - item : end - i;
        const unsigned char *sep = memchr(item, 0x01, (size_t)item_len);
        if (sep == NULL) {
            result = PROPS_NO_SEPARATOR;
            break;
        }
        if (sep == item) {
            result = PROPS_EMPTY_NAME;
            break;
        }
        Py_ssize_t name_len = sep - item, value_len = item_len - name_len - 1;
        if (memchr(sep + 1, 0x01, (size_t)value_len) != NULL) {
            result = PROPS_SECOND_SEPARATOR;
            break;
        }
        int seen = name_seen(&names, item, name_len);
        if (seen != 0) {
            result = seen > 0 ? PROPS_REPEATED : PROPS_NO_MEMORY;
            break;
        }
        note_found(found, item, name_len, sep + 1, value_len);
        if (stop == NULL)
            break;
        i += item_len + 1;
    }
    names_free(&names);
    if (result != PROPS_OK)
        *item_no = no;
    return result;
}

/* RemoteProtocolError with the message stored.py gives (prefixed for a batch entry). */
static void raise_protocol(PyObject *reason, Py_ssize_t entry_pos)
{
    if (reason == NULL)
        return;
    PyObject *msg = reason;
    if (entry_pos >= 0) {
        msg = PyUnicode_FromFormat("batch entry at %zd: %U", entry_pos, reason);
        Py_DECREF(reason);
        if (msg == NULL)
            return;
    }
    PyErr_SetObject(remote_protocol_error, msg);
    Py_DECREF(msg);
}

static void raise_props(int problem, Py_ssize_t item_no, Py_ssize_t entry_pos)
{
    PyObject *reason = NULL;
    switch (problem) {
    case PROPS_NOT_UTF8:
        reason = PyUnicode_FromString("message properties are not UTF-8");
        break;
    case PROPS_NUL:
        reason = PyUnicode_FromString("message properties contain a NUL character");
        break;
    case PROPS_NO_SEPARATOR:
        reason = PyUnicode_FromFormat("message property %zd has no name/value separator", item_no);
        break;
    case PROPS_EMPTY_NAME:
        reason = PyUnicode_FromFormat("message property %zd has an empty name", item_no);
        break;
    case PROPS_SECOND_SEPARATOR:
        reason = PyUnicode_FromFormat("message property %zd has a second name/value separator",
                                      item_no);
        break;
    case PROPS_REPEATED:
        reason = PyUnicode_FromFormat("message property %zd repeats an earlier name", item_no);
        break;
    default:
        PyErr_NoMemory();
        return;
    }
    raise_protocol(reason, entry_pos);
}

static void raise_props_size(Py_ssize_t size, Py_ssize_t entry_pos)
{
    raise_protocol(PyUnicode_FromFormat("message properties take %zd bytes, over %d", size,
                                        PROPERTIES_SIZE_MAX),
                   entry_pos);
}

/* -- encoding -------------------------------------------------------------------------------- */

static int body_crc(const unsigned char *p, Py_ssize_t n, int32_t *out)
{
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *r = PyObject_CallOneArg(zlib_crc32, view);
    Py_DECREF(view);
    if (r == NULL)
        return -1;
    unsigned long v = PyLong_AsUnsignedLong(r);
    Py_DECREF(r);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    *out = (int32_t)(v & 0x7FFFFFFFul);
    return 0;
}

/* The fields every message of one encoder call shares. */
typedef struct {
    Py_buffer topic, born, store;  /* u8 length + topic; packed ip + i32 port (8 or 20 bytes) */
    int queue_id, sys_flag, reconsume;
    long long born_ts;
} StoreContext;

/* stored.py's _check_context: ValueError for arguments no caller should pass; else sets the
 * host kind bits of the sysFlag from the hosts. */
static int context_check(StoreContext *c)
{
    const unsigned char *t = c->topic.buf;
    if (c->topic.len < 2 || t[0] != c->topic.len - 1) {
        PyErr_SetString(PyExc_ValueError, "topic_part must be the u8 length and the topic");
        return -1;
    }
    if ((c->born.len != HOST_V4_SIZE && c->born.len != HOST_V6_SIZE) ||
        (c->store.len != HOST_V4_SIZE && c->store.len != HOST_V6_SIZE)) {
        PyErr_SetString(PyExc_ValueError, "hosts must be packed ip + port (8 or 20 bytes)");
        return -1;
    }
    c->sys_flag = (c->sys_flag & ~SYSFLAG_HOST_V6_BITS) |
                  (c->born.len == HOST_V6_SIZE ? SYSFLAG_BORNHOST_V6 : 0) |
                  (c->store.len == HOST_V6_SIZE ? SYSFLAG_STOREHOST_V6 : 0);
    return 0;
}

static void release_context(StoreContext *c)
{
    PyBuffer_Release(&c->topic);
    PyBuffer_Release(&c->born);
    PyBuffer_Release(&c->store);
}

static Py_ssize_t stored_size(const StoreContext *c, Py_ssize_t body_len, Py_ssize_t props_len)
{
    return header_size(c->sys_flag) + body_len + c->topic.len + 2 + props_len;
}

/* One message in stored form at ``w`` (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and
 * PREPAREDTRANSACTIONOFFSET zero), its properties followed by a final separator when
 * ``add_separator``; returns its size, or -1 with an exception set. ``w`` has room for it. */
static Py_ssize_t write_stored(unsigned char *w, const StoreContext *c, int32_t flag,
                               const unsigned char *body, Py_ssize_t body_len,
                               const unsigned char *props, Py_ssize_t props_len, int add_separator)
{
    int32_t crc;
    if (body_crc(body, body_len, &crc) < 0)
        return -1;
    Py_ssize_t out_props = props_len + (add_separator ? 1 : 0);
    Py_ssize_t stored = stored_size(c, body_len, out_props);
    put_i32(w + TOTALSIZE_AT, (int32_t)stored);
    put_i32(w + MAGICCODE_AT, MAGIC_CODE);
    put_i32(w + BODYCRC_AT, crc);
    put_i32(w + QUEUEID_AT, c->queue_id);
    put_i32(w + FLAG_AT, flag);
    put_i64(w + QUEUEOFFSET_AT, 0);
    put_i64(w + PHYSICALOFFSET_AT, 0);
    put_i32(w + SYSFLAG_AT, c->sys_flag);
    put_i64(w + BORNTIMESTAMP_AT, c->born_ts);
    w += BORNHOST_AT;
    memcpy(w, c->born.buf, (size_t)c->born.len);
    w += c->born.len;
    put_i64(w, 0);  /* STORETIMESTAMP */
    w += 8;
    memcpy(w, c->store.buf, (size_t)c->store.len);
    w += c->store.len;
    put_i32(w + TAIL_RECONSUMETIMES_AT, c->reconsume);
    put_i64(w + TAIL_PREPAREDTRANSACTIONOFFSET_AT, 0);
    put_i32(w + TAIL_BODY_LENGTH_AT, (int32_t)body_len);
    w += HEADER_TAIL_SIZE;
    memcpy(w, body, (size_t)body_len);
    w += body_len;
    memcpy(w, c->topic.buf, (size_t)c->topic.len);
    w += c->topic.len;
    w[0] = (unsigned char)((uint16_t)out_props >> 8);
    w[1] = (unsigned char)out_props;
    memcpy(w + 2, props, (size_t)props_len);
    if (add_separator)
        w[2 + props_len] = 0x02;
    return stored;
}

static int needs_separator(const unsigned char *props, Py_ssize_t n)
{
    return n > 0 && props[n - 1] != 0x02;
}

/*
 * encode_wire_single(body, properties, flag, topic_part, queue_id, sys_flag, born_timestamp,
 *                    born_host, store_host, reconsume_times) -> bytearray | None
 * The twin of stored.encode_wire_single_py.
 */
static PyObject *py_encode_wire_single(PyObject *self, PyObject *args)
{
    Py_buffer body, props;
    StoreContext c;
    int flag;
    if (!PyArg_ParseTuple(args, "y*y*iy*iiLy*y*i", &body, &props, &flag, &c.topic, &c.queue_id,
                          &c.sys_flag, &c.born_ts, &c.born, &c.store, &c.reconsume))
        return NULL;
    PyObject *blob = NULL;
    const unsigned char *p = props.buf;
    Py_ssize_t n = props.len, item_no;
    PropsFound found;
    if (context_check(&c) < 0)
        goto done;
    if (n > PROPERTIES_SIZE_MAX) {
        raise_props_size(n, -1);
        goto done;
    }
    int problem = props_check(p, n, &found, &item_no);
    if (problem != PROPS_OK) {
        raise_props(problem, item_no, -1);
        goto done;
    }
    if (found.delay.p != NULL || found.tran_msg.p != NULL) {
        blob = Py_NewRef(Py_None);  /* the broker must act on it: the caller's general path */
        goto done;
    }
    int add = needs_separator(p, n);
    if (n + add > PROPERTIES_SIZE_MAX) {
        raise_props_size(n + add, -1);
        goto done;
    }
    blob = PyByteArray_FromStringAndSize(NULL, stored_size(&c, body.len, n + add));
    if (blob == NULL)
        goto done;
    if (write_stored((unsigned char *)PyByteArray_AS_STRING(blob), &c, flag, body.buf, body.len,
                     p, n, add) < 0)
        Py_CLEAR(blob);
done:
    PyBuffer_Release(&body);
    PyBuffer_Release(&props);
    release_context(&c);
    return blob;
}

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

static void read_entry(const unsigned char *b, Py_ssize_t pos, BatchEntry *e)
{
    e->pos = pos;
    e->flag = get_i32(b + pos + BATCH_FLAG_AT);
    e->body_len = get_i32(b + pos + BATCH_BODY_LEN_AT);
    e->body = b + pos + BATCH_BODY_AT;
    e->props_len = get_i16(e->body + e->body_len);
    e->props = e->body + e->body_len + 2;
}

/* protocol.batch.iter_entries' checks of the entry at ``pos`` (same order, same messages);
 * 0, or -1 with RemoteProtocolError set. */
static int check_entry(const unsigned char *b, Py_ssize_t end, Py_ssize_t pos)
{
    Py_ssize_t left = end - pos;
    if (left < BATCH_ENTRY_OVERHEAD) {
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd truncated: %zd bytes left", pos,
                                            left), -1);
        return -1;
    }
    int32_t total = get_i32(b + pos + BATCH_TOTAL_AT), body_len = get_i32(b + pos + BATCH_BODY_LEN_AT);
    if (body_len < 0 || body_len > left - BATCH_ENTRY_OVERHEAD) {
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: bad body length %d", pos,
                                            (int)body_len), -1);
        return -1;
    }
    int16_t props_len = get_i16(b + pos + BATCH_BODY_AT + body_len);
    if (props_len < 0 || props_len > left - BATCH_ENTRY_OVERHEAD - body_len) {
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: bad properties length", pos), -1);
        return -1;
    }
    if ((Py_ssize_t)total != BATCH_ENTRY_OVERHEAD + (Py_ssize_t)body_len + props_len) {
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: total size %d disagrees", pos,
                                            (int)total), -1);
        return -1;
    }
    return 0;
}

/*
 * encode_wire_batch(body, topic_part, queue_id, sys_flag, born_timestamp, born_host, store_host,
 *                   reconsume_times, max_message_size, max_blob_size)
 *     -> (bytearray blob, list of relative positions) | None
 * The twin of stored.encode_wire_batch_py (same order of refusals).
 */
static PyObject *py_encode_wire_batch(PyObject *self, PyObject *args)
{
    Py_buffer body;
    StoreContext c;
    Py_ssize_t max_message_size, max_blob_size;
    if (!PyArg_ParseTuple(args, "y*y*iiLy*y*inn", &body, &c.topic, &c.queue_id, &c.sys_flag,
                          &c.born_ts, &c.born, &c.store, &c.reconsume, &max_message_size,
                          &max_blob_size))
        return NULL;
    PyObject *result = NULL, *blob = NULL, *rels = NULL;
    const unsigned char *b = body.buf;
    Py_ssize_t end = body.len, pos = 0, out_size = 0, count = 0, item_no;
    BatchEntry e;
    PropsFound found;
    int routed = 0;

    if (context_check(&c) < 0)
        goto done;
    /* pass 1: lengths and properties, entry by entry */
    while (pos < end) {
        if (check_entry(b, end, pos) < 0)
            goto done;
        read_entry(b, pos, &e);
        int problem = props_check(e.props, e.props_len, &found, &item_no);
        if (problem != PROPS_OK) {
            raise_props(problem, item_no, pos);
            goto done;
        }
        routed |= found.delay.p != NULL || found.tran_msg.p != NULL;
        pos += BATCH_ENTRY_OVERHEAD + e.body_len + e.props_len;
        count++;
    }
    if (count == 0) {
        raise_protocol(PyUnicode_FromString("empty batch"), -1);
        goto done;
    }
    if (routed) {
        result = Py_NewRef(Py_None);  /* the broker must act on an entry: the general path */
        goto done;
    }
    /* pass 2: limits, entry by entry */
    for (pos = 0; pos < end; pos += BATCH_ENTRY_OVERHEAD + e.body_len + e.props_len) {
        read_entry(b, pos, &e);
        if (e.body_len > max_message_size) {
            raise_protocol(PyUnicode_FromFormat("batch entry at %zd: body of %zd bytes exceeds the "
                                                "limit %zd", pos, e.body_len, max_message_size),
                           -1);
            goto done;
        }
        Py_ssize_t props_out = e.props_len + needs_separator(e.props, e.props_len);
        if (props_out > PROPERTIES_SIZE_MAX) {
            raise_props_size(props_out, pos);
            goto done;
        }
        out_size += stored_size(&c, e.body_len, props_out);
        if (out_size > max_blob_size) {
            raise_protocol(PyUnicode_FromFormat("the batch takes more than %zd bytes in stored "
                                                "form", max_blob_size), -1);
            goto done;
        }
    }
    blob = PyByteArray_FromStringAndSize(NULL, out_size);
    rels = PyList_New(count);
    if (blob == NULL || rels == NULL)
        goto done;
    /* pass 3: write */
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(blob);
    Py_ssize_t at = 0, i = 0;
    for (pos = 0; pos < end; pos += BATCH_ENTRY_OVERHEAD + e.body_len + e.props_len, i++) {
        read_entry(b, pos, &e);
        PyObject *rel = PyLong_FromSsize_t(at);
        if (rel == NULL)
            goto done;
        PyList_SET_ITEM(rels, i, rel);
        Py_ssize_t stored = write_stored(o + at, &c, e.flag, e.body, e.body_len, e.props,
                                         e.props_len, needs_separator(e.props, e.props_len));
        if (stored < 0)
            goto done;
        at += stored;
    }
    result = PyTuple_Pack(2, blob, rels);
done:
    Py_XDECREF(blob);
    Py_XDECREF(rels);
    PyBuffer_Release(&body);
    release_context(&c);
    return result;
}

/*
 * patch_positions(buf, pos, physical_offset, queue_offset, store_ts, rel_positions)
 *     -> next queue offset
 * The twin of stored.patch_positions_py: QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of every
 * message of a blob appended at ``pos``; the messages that take no queue offset get 0.
 */
static PyObject *py_patch_positions(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos;
    long long phy, qoff, now;
    PyObject *rels;
    if (!PyArg_ParseTuple(args, "w*nLLLO!", &buf, &pos, &phy, &qoff, &now, &PyList_Type, &rels))
        return NULL;
    unsigned char *p = buf.buf;
    Py_ssize_t n = PyList_GET_SIZE(rels);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t rel = PyLong_AsSsize_t(PyList_GET_ITEM(rels, i));
        if (rel == -1 && PyErr_Occurred())
            goto error;
        if (rel < 0 || pos < 0 || pos > buf.len || rel > buf.len - pos ||
            buf.len - pos - rel < POSITION_FIELDS_END) {
            PyErr_SetString(PyExc_ValueError, "patch_positions: position outside the buffer");
            goto error;
        }
        unsigned char *m = p + pos + rel;
        int32_t sys_flag = get_i32(m + SYSFLAG_AT);
        if (takes_queue_entry(sys_flag)) {
            put_i64(m + QUEUEOFFSET_AT, qoff);
            qoff++;
        } else {
            put_i64(m + QUEUEOFFSET_AT, 0);
        }
        put_i64(m + PHYSICALOFFSET_AT, phy + rel);
        put_i64(m + store_ts_at(sys_flag), now);
    }
    PyBuffer_Release(&buf);
    return PyLong_FromLongLong(qoff);
error:
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- dispatch: stored messages -> queue and index entries ------------------------------------ */

/* stored.py's _topic_problem: 1..127 bytes of UTF-8 that can name a queue directory. */
static int topic_ok(const unsigned char *t, Py_ssize_t n)
{
    if (!utf8_valid(t, n) || memchr(t, '/', (size_t)n) != NULL || memchr(t, 0, (size_t)n) != NULL)
        return 0;
    return !((n == 1 && t[0] == '.') || (n == 2 && t[0] == '.' && t[1] == '.'));
}

typedef struct {
    Py_ssize_t total;
    int32_t sys_flag;
    const unsigned char *topic;
    Py_ssize_t topic_len;
    PropsFound found;
} StoredRead;

/* stored.py's _read, the same checks in the same order: 1 when the bytes at ``m`` (``avail``
 * of them up to the limit) are a stored message, 0 when not, -1 on a memory error. */
static int read_stored(const unsigned char *m, Py_ssize_t avail, StoredRead *r)
{
    if (avail < BLANK_ENTRY_SIZE)
        return 0;
    int32_t total = get_i32(m + TOTALSIZE_AT);
    if (get_i32(m + MAGICCODE_AT) != MAGIC_CODE)
        return 0;
    if (total < MIN_STORED_SIZE || total > avail)
        return 0;
    int32_t sys_flag = get_i32(m + SYSFLAG_AT);
    Py_ssize_t head = header_size(sys_flag);
    if (total < head + TAIL_MIN)
        return 0;
    if (get_i32(m + QUEUEID_AT) < 0 || get_i64(m + QUEUEOFFSET_AT) < 0)
        return 0;
    Py_ssize_t body_len = get_i32(m + head - HEADER_TAIL_SIZE + TAIL_BODY_LENGTH_AT);
    if (body_len < 0 || head + body_len + BODY_TAIL > total)
        return 0;
    Py_ssize_t at = head + body_len;
    Py_ssize_t topic_len = m[at];
    if (topic_len == 0 || topic_len > TOPIC_SIZE_MAX || head + body_len + BODY_TAIL + topic_len > total)
        return 0;
    if (!topic_ok(m + at + 1, topic_len))
        return 0;
    r->topic = m + at + 1;
    r->topic_len = topic_len;
    at += 1 + topic_len;
    Py_ssize_t props_len = get_i16(m + at);
    if (head + body_len + BODY_TAIL + topic_len + props_len != total)
        return 0;
    Py_ssize_t item_no;
    int problem = props_check(m + at + 2, props_len, &r->found, &item_no);
    if (problem == PROPS_NO_MEMORY) {
        PyErr_NoMemory();
        return -1;
    }
    if (problem != PROPS_OK)
        return 0;
    r->total = total;
    r->sys_flag = sys_flag;
    return 1;
}

static PyObject *span_str(Span s)
{
    if (s.p == NULL)
        return Py_NewRef(Py_None);
    return PyUnicode_DecodeUTF8((const char *)s.p, s.len, "strict");  /* checked UTF-8 */
}

/* One scan record (see stored.ScanRecord), or NULL with an exception set. */
static PyObject *scan_record(const unsigned char *m, Py_ssize_t pos, const StoredRead *r)
{
    long tags_code = 0;
    if (r->found.tags.p != NULL) {
        PyObject *tags = span_str(r->found.tags);
        if (tags == NULL)
            return NULL;
        tags_code = java_hash_unicode(tags);
        Py_DECREF(tags);
    }
    PyObject *keys = span_str(r->found.keys);
    PyObject *uniq = keys ? span_str(r->found.uniq) : NULL;
    PyObject *delay = uniq ? span_str(r->found.delay) : NULL;
    if (delay == NULL) {
        Py_XDECREF(keys);
        Py_XDECREF(uniq);
        return NULL;
    }
    return Py_BuildValue("(nniLLy#lNNN)", pos, r->total, (int)get_i32(m + QUEUEID_AT),
                         (long long)get_i64(m + QUEUEOFFSET_AT),
                         (long long)get_i64(m + store_ts_at(r->sys_flag)), (const char *)r->topic,
                         r->topic_len, tags_code, keys, uniq, delay);
}

/*
 * scan_stored(buf, pos, limit, count_max) -> (records, pos reached, count, stop)
 * The twin of stored.scan_py.
 */
static PyObject *py_scan_stored(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, limit, count_max;
    if (!PyArg_ParseTuple(args, "y*nnn", &buf, &pos, &limit, &count_max))
        return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "scan: negative position");
        PyBuffer_Release(&buf);
        return NULL;
    }
    const unsigned char *p = buf.buf;
    if (limit > buf.len)
        limit = buf.len;
    PyObject *records = PyList_New(0);
    if (records == NULL)
        goto error;
    Py_ssize_t count = 0;
    int stop = 0;
    StoredRead r;
    while (pos < limit && count < count_max) {
        const unsigned char *m = p + pos;
        if (limit - pos >= BLANK_ENTRY_SIZE && get_i32(m + MAGICCODE_AT) == BLANK_MAGIC_CODE) {
            stop = SCAN_BLANK;
            break;
        }
        int ok = read_stored(m, limit - pos, &r);
        if (ok < 0)
            goto error;
        if (ok == 0) {
            stop = SCAN_BAD;
            break;
        }
        count++;
        if (takes_queue_entry(r.sys_flag)) {
            PyObject *rec = scan_record(m, pos, &r);
            if (rec == NULL)
                goto error;
            int failed = PyList_Append(records, rec);
            Py_DECREF(rec);
            if (failed)
                goto error;
        }
        pos += r.total;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("(Nnni)", records, pos, count, stop);
error:
    Py_XDECREF(records);
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- module ----------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"java_string_hash", py_java_string_hash, METH_O, "Java's String.hashCode of a str."},
    {"index_key_hash", (PyCFunction)(void (*)(void))py_index_key_hash, METH_FASTCALL,
     "abs(hashCode(topic + '#' + key)); 0 for Integer.MIN_VALUE."},
    {"encode_wire_batch", py_encode_wire_batch, METH_VARARGS,
     "Stored form of a batch body's messages; None when the broker must act on one."},
    {"encode_wire_single", py_encode_wire_single, METH_VARARGS,
     "Stored form of one message from its body and wire properties; None when the broker "
     "must act on them."},
    {"patch_positions", py_patch_positions, METH_VARARGS,
     "Queue offset, physical offset and store time of each message of an appended blob."},
    {"scan_stored", py_scan_stored, METH_VARARGS,
     "What dispatch needs of each stored message in a range."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "OrbitMQ's per-message byte work in C (optional).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (zlib == NULL)
        return NULL;
    zlib_crc32 = PyObject_GetAttrString(zlib, "crc32");
    Py_DECREF(zlib);
    if (zlib_crc32 == NULL)
        return NULL;
    PyObject *errors = PyImport_ImportModule("orbitmq.errors");
    if (errors == NULL)
        return NULL;
    remote_protocol_error = PyObject_GetAttrString(errors, "RemoteProtocolError");
    Py_DECREF(errors);
    if (remote_protocol_error == NULL)
        return NULL;
    return PyModule_Create(&module);
}
