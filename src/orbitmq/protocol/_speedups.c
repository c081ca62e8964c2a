/*
 * orbitmq.protocol._speedups: the broker's per-message byte work, in C.
 *
 * Optional: the C twin of the hot functions of the stored codec, orbitmq/protocol/stored/
 * (encode_wire_single, encode_wire_batch, patch_positions, scan_stored, stored_columns), of
 * protocol/java_hash.py, and the broker's native fast path of plain sends (FastPath,
 * _fastpath.h, over the same encoder: _stored_encode.h). Every function takes the same
 * arguments as its Python twin (``*_py`` in
 * the stored package) and gives the same bytes,
 * the same None and the same refusals (RemoteProtocolError with the same message, ValueError,
 * OverflowError); tests/unit/test_stored_twins.py checks it. The build hook (hatch_build.py)
 * compiles this file when a C compiler is present; without it, or with ORBITMQ_PURE_PYTHON=1,
 * OrbitMQ runs the Python twins. The layout and the rules (what is refused, and with which
 * message) are in _stored_rules.h. hmac_sha1 exposes _hmac_sha1.h (the fast path's signature
 * check, _fastpath_auth.h) to the tests that compare it with hashlib.
 *
 * Every byte read from a buffer is bounds-checked first: the input may be a peer's batch body or a
 * damaged commit log segment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_stored_rules.h"
#include "_stored_encode.h"
#include "_fastpath.h"
#include "_column_batch.h"

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

/* -- encoding: the twins' Python faces over _stored_encode.h ---------------------------------- */

/* The encoder arguments every call shares, as buffers; released by release_parts. */
typedef struct {
    Py_buffer topic, born, store;
} ContextParts;

static void release_parts(ContextParts *parts)
{
    PyBuffer_Release(&parts->topic);
    PyBuffer_Release(&parts->born);
    PyBuffer_Release(&parts->store);
}

/* StoreContext over ``parts``; ValueError (as stored._encode._check_context) when malformed. */
static int context_from(StoreContext *c, const ContextParts *parts)
{
    c->topic = parts->topic.buf;
    c->topic_len = parts->topic.len;
    c->born = parts->born.buf;
    c->born_len = parts->born.len;
    c->store = parts->store.buf;
    c->store_len = parts->store.len;
    switch (context_check(c)) {
    case CONTEXT_BAD_TOPIC:
        PyErr_SetString(PyExc_ValueError, "topic_part must be the u8 length and the topic");
        return -1;
    case CONTEXT_BAD_HOST:
        PyErr_SetString(PyExc_ValueError, "hosts must be packed ip + port (8 or 20 bytes)");
        return -1;
    }
    return 0;
}

/*
 * encode_wire_single(body, properties, flag, topic_part, queue_id, sys_flag, born_timestamp,
 *                    born_host, store_host, reconsume_times) -> bytearray | None
 * The twin of stored.encode_wire_single_py.
 */
static PyObject *py_encode_wire_single(PyObject *self, PyObject *args)
{
    Py_buffer body, props;
    ContextParts parts;
    StoreContext c;
    int flag, queue_id, sys_flag, reconsume;
    long long born_ts;
    if (!PyArg_ParseTuple(args, "y*y*iy*iiLy*y*i", &body, &props, &flag, &parts.topic, &queue_id,
                          &sys_flag, &born_ts, &parts.born, &parts.store, &reconsume))
        return NULL;
    c.queue_id = queue_id;
    c.sys_flag = sys_flag;
    c.reconsume = reconsume;
    c.born_ts = born_ts;
    PyObject *blob = NULL;
    SinglePlan plan;
    if (context_from(&c, &parts) < 0)
        goto done;
    single_plan(props.buf, props.len, &plan);
    switch (plan.status) {
    case SINGLE_PROPS_SIZE:
        raise_props_size(plan.detail, -1);
        goto done;
    case SINGLE_PROPS_RULE:
        raise_props(plan.problem, plan.item_no, -1);
        goto done;
    case SINGLE_ROUTED:
        blob = Py_NewRef(Py_None);  /* the broker must act on it: the caller's general path */
        goto done;
    }
    blob = PyByteArray_FromStringAndSize(NULL, stored_size(&c, body.len, props.len + plan.add_separator));
    if (blob == NULL)
        goto done;
    write_stored((unsigned char *)PyByteArray_AS_STRING(blob), &c, flag, body.buf, body.len,
                 props.buf, props.len, plan.add_separator);
done:
    PyBuffer_Release(&body);
    PyBuffer_Release(&props);
    release_parts(&parts);
    return blob;
}

/* RemoteProtocolError for a batch plan's refusal, worded as encode_wire_batch_py words it. */
static void raise_batch(const BatchPlan *plan, Py_ssize_t max_message_size, Py_ssize_t max_blob_size)
{
    Py_ssize_t pos = plan->pos;
    switch (plan->status) {
    case BATCH_ENTRY_TRUNCATED:
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd truncated: %zd bytes left", pos,
                                            plan->detail), -1);
        break;
    case BATCH_BAD_BODY_LENGTH:
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: bad body length %d", pos,
                                            (int)plan->detail), -1);
        break;
    case BATCH_BAD_PROPS_LENGTH:
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: bad properties length", pos), -1);
        break;
    case BATCH_TOTAL_DISAGREES:
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: total size %d disagrees", pos,
                                            (int)plan->detail), -1);
        break;
    case BATCH_PROPS_RULE:
        raise_props(plan->problem, plan->item_no, pos);
        break;
    case BATCH_EMPTY:
        raise_protocol(PyUnicode_FromString("empty batch"), -1);
        break;
    case BATCH_BODY_TOO_BIG:
        raise_protocol(PyUnicode_FromFormat("batch entry at %zd: body of %zd bytes exceeds the "
                                            "limit %zd", pos, plan->detail, max_message_size), -1);
        break;
    case BATCH_PROPS_SIZE:
        raise_props_size(plan->detail, pos);
        break;
    case BATCH_BLOB_TOO_BIG:
        raise_protocol(PyUnicode_FromFormat("the batch takes more than %zd bytes in stored form",
                                            max_blob_size), -1);
        break;
    }
}

/* A call of encode_wire_batch or check_wire_batch: its arguments and its batch's plan. */
typedef struct {
    Py_buffer body;
    ContextParts parts;
    StoreContext c;
    Py_ssize_t max_message_size, max_blob_size;
    BatchPlan plan;
    int parsed;  /* the buffers are held: batch_call_release */
} BatchCall;

/* The arguments (body, topic_part, queue_id, sys_flag, born_timestamp, born_host, store_host,
 * reconsume_times, max_message_size, max_blob_size) parsed into ``b`` and the batch planned:
 * 1 planned, 0 declined (an entry the broker must act on: the general path), -1 with an
 * exception set (a refusal: encode_wire_batch_py's, in its order). */
static int batch_call(PyObject *args, BatchCall *b)
{
    int queue_id, sys_flag, reconsume;
    long long born_ts;
    b->parsed = 0;
    if (!PyArg_ParseTuple(args, "y*y*iiLy*y*inn", &b->body, &b->parts.topic, &queue_id,
                          &sys_flag, &born_ts, &b->parts.born, &b->parts.store, &reconsume,
                          &b->max_message_size, &b->max_blob_size))
        return -1;
    b->parsed = 1;
    b->c.queue_id = queue_id;
    b->c.sys_flag = sys_flag;
    b->c.reconsume = reconsume;
    b->c.born_ts = born_ts;
    if (context_from(&b->c, &b->parts) < 0)
        return -1;
    batch_plan(b->body.buf, b->body.len, &b->c, b->max_message_size, b->max_blob_size, NULL, NULL,
               &b->plan);
    if (b->plan.status == BATCH_ROUTED)
        return 0;
    if (b->plan.status != BATCH_OK) {
        raise_batch(&b->plan, b->max_message_size, b->max_blob_size);
        return -1;
    }
    return 1;
}

static void batch_call_release(BatchCall *b)
{
    if (b->parsed) {
        PyBuffer_Release(&b->body);
        release_parts(&b->parts);
    }
}

/*
 * encode_wire_batch(body, topic_part, queue_id, sys_flag, born_timestamp, born_host, store_host,
 *                   reconsume_times, max_message_size, max_blob_size)
 *     -> (bytearray blob, list of relative positions) | None
 * The twin of stored.encode_wire_batch_py (same order of refusals).
 */
static PyObject *py_encode_wire_batch(PyObject *self, PyObject *args)
{
    BatchCall b;
    PyObject *result = NULL, *blob = NULL, *rels = NULL;
    Py_ssize_t *positions = NULL;
    int planned = batch_call(args, &b);
    if (planned == 0)
        result = Py_NewRef(Py_None);
    if (planned != 1)
        goto done;
    blob = PyByteArray_FromStringAndSize(NULL, b.plan.out_size);
    rels = PyList_New(b.plan.count);
    positions = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)b.plan.count);
    if (blob == NULL || rels == NULL || positions == NULL) {
        if (positions == NULL)
            PyErr_NoMemory();
        goto done;
    }
    batch_write((unsigned char *)PyByteArray_AS_STRING(blob), b.body.buf, b.body.len, &b.c,
                positions);
    for (Py_ssize_t i = 0; i < b.plan.count; i++) {
        PyObject *rel = PyLong_FromSsize_t(positions[i]);
        if (rel == NULL)
            goto done;
        PyList_SET_ITEM(rels, i, rel);
    }
    result = PyTuple_Pack(2, blob, rels);
done:
    PyMem_Free(positions);
    Py_XDECREF(blob);
    Py_XDECREF(rels);
    batch_call_release(&b);
    return result;
}

/*
 * check_wire_batch(same arguments) -> (count, entries without a UNIQ_KEY) | None
 * The twin of stored.check_wire_batch_py: encode_wire_batch's checks and refusals, nothing
 * encoded.
 */
static PyObject *py_check_wire_batch(PyObject *self, PyObject *args)
{
    BatchCall b;
    int planned = batch_call(args, &b);
    PyObject *result = planned < 0 ? NULL : planned == 0 ? Py_NewRef(Py_None)
                       : Py_BuildValue("(nn)", b.plan.count, b.plan.without_uniq);
    batch_call_release(&b);
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
        qoff = patch_one(p + pos + rel, phy + rel, qoff, now);
    }
    PyBuffer_Release(&buf);
    return PyLong_FromLongLong(qoff);
error:
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- dispatch: stored messages -> queue and index entries ------------------------------------ */

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

#include "_dispatch_plan.h"

/* -- bulk decode: a pull body as Arrow-shaped columns (stored._columns) -------------------- */

#define COLUMN_BODY 1
#define COLUMN_TAGS 2
#define COLUMN_MSG_ID 4
#define COLUMN_KEYS 8
#define COLUMNS_DATA_MAX 0x7FFFFFFF
#define SYSFLAG_COMPRESSED 1

static PyObject *zlib_decompress;  /* zlib.decompress */

/* A growing bytearray: ``len`` bytes used of its size. */
typedef struct {
    PyObject *ba;
    Py_ssize_t len;
} Out;

static int out_init(Out *o, Py_ssize_t cap)
{
    o->len = 0;
    o->ba = PyByteArray_FromStringAndSize(NULL, cap > 0 ? cap : 0);
    return o->ba == NULL ? -1 : 0;
}

static char *out_room(Out *o, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(o->ba);
    if (n > PY_SSIZE_T_MAX - o->len) {
        PyErr_NoMemory();
        return NULL;
    }
    if (o->len + n > size) {
        Py_ssize_t want = size > PY_SSIZE_T_MAX / 2 ? PY_SSIZE_T_MAX : size * 2;
        if (want < o->len + n)
            want = o->len + n;
        if (want < 64)
            want = 64;
        if (PyByteArray_Resize(o->ba, want) < 0)
            return NULL;
    }
    char *p = PyByteArray_AS_STRING(o->ba) + o->len;
    o->len += n;
    return p;
}

static int out_put(Out *o, const void *s, Py_ssize_t n)
{
    char *p = out_room(o, n);
    if (p == NULL)
        return -1;
    if (n > 0)
        memcpy(p, s, (size_t)n);
    return 0;
}

static int out_i32(Out *o, int32_t v) { return out_put(o, &v, 4); }
static int out_i64(Out *o, int64_t v) { return out_put(o, &v, 8); }

/* Variable-width values: bytes, then the int32 end offset. */
static int out_value(Out *data, Out *offsets, const void *s, Py_ssize_t n)
{
    if (n > COLUMNS_DATA_MAX - data->len) {
        PyErr_SetString(PyExc_OverflowError, "stored_columns: a column holds more than 2 GiB");
        return -1;
    }
    if (out_put(data, s, n) < 0)
        return -1;
    return out_i32(offsets, (int32_t)data->len);
}

enum { C_QID, C_QOFF, C_BORN, C_STORE, C_REC, C_BODY_OFF, C_BODY, C_TAGS_VALID, C_TAGS_OFF,
       C_TAGS, C_ID_OFF, C_ID, C_KEYS_OFF, C_KEY_OFF, C_KEY, C_COUNT };

/* The RemoteProtocolError the Python reader raises for the message at ``pos`` (stored.peek
 * words it: one wording everywhere). */
static void raise_like_peek(PyObject *buf, Py_ssize_t pos)
{
    PyObject *mod = PyImport_ImportModule("orbitmq.protocol.stored._decode");
    if (mod == NULL)
        return;
    PyObject *r = PyObject_CallMethod(mod, "peek", "On", buf, pos);
    Py_DECREF(mod);
    if (r != NULL) {  /* cannot happen: the C checks refused it */
        Py_DECREF(r);
        PyErr_Format(remote_protocol_error, "stored message at %zd: refused", pos);
    }
}

/* The body of the kept message at ``m`` (``body_of`` with check_crc and decompress) added to the
 * body column. */
static int put_body(Out *cols, const unsigned char *m, Py_ssize_t pos, int32_t sys_flag)
{
    Py_ssize_t head = header_size(sys_flag);
    Py_ssize_t body_len = get_i32(m + head - HEADER_TAIL_SIZE + TAIL_BODY_LENGTH_AT);
    const unsigned char *body = m + head;
    int32_t crc = (int32_t)(crc32_of(body, body_len) & 0x7FFFFFFFu);
    if (crc != get_i32(m + BODYCRC_AT)) {
        PyErr_Format(remote_protocol_error, "stored message at %zd: body CRC mismatch", pos);
        return -1;
    }
    if (!(sys_flag & SYSFLAG_COMPRESSED))
        return out_value(&cols[C_BODY], &cols[C_BODY_OFF], body, body_len);
    PyObject *view = PyMemoryView_FromMemory((char *)body, body_len, PyBUF_READ);
    PyObject *inflated = view ? PyObject_CallOneArg(zlib_decompress, view) : NULL;
    Py_XDECREF(view);
    if (inflated == NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        PyObject *text = value ? PyObject_Str(value) : NULL;
        if (text != NULL)
            PyErr_Format(remote_protocol_error, "stored message: bad compressed body: %U", text);
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    int r = out_value(&cols[C_BODY], &cols[C_BODY_OFF], PyBytes_AS_STRING(inflated),
                      PyBytes_GET_SIZE(inflated));
    Py_DECREF(inflated);
    return r;
}

/* UNIQ_KEY, else the offset message id (hex of store ip + port + physical offset). */
static int put_msg_id(Out *cols, const unsigned char *m, const StoredRead *r)
{
    if (r->found.uniq.p != NULL && r->found.uniq.len > 0)
        return out_value(&cols[C_ID], &cols[C_ID_OFF], r->found.uniq.p, r->found.uniq.len);
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t ip_len = (r->sys_flag & SYSFLAG_STOREHOST_V6) ? 16 : 4;
    const unsigned char *store = m + store_ts_at(r->sys_flag) + 8;
    unsigned char raw[16 + 4 + 8];
    memcpy(raw, store, (size_t)ip_len + 4);
    memcpy(raw + ip_len + 4, m + PHYSICALOFFSET_AT, 8);
    char text[2 * sizeof raw];
    Py_ssize_t n = ip_len + 12;
    for (Py_ssize_t i = 0; i < n; i++) {
        text[2 * i] = hex[raw[i] >> 4];
        text[2 * i + 1] = hex[raw[i] & 15];
    }
    return out_value(&cols[C_ID], &cols[C_ID_OFF], text, 2 * n);
}

static int put_keys(Out *cols, Span keys)
{
    Py_ssize_t i = 0;
    while (keys.p != NULL && i < keys.len) {
        const unsigned char *sp = memchr(keys.p + i, ' ', (size_t)(keys.len - i));
        Py_ssize_t end = sp ? sp - keys.p : keys.len;
        if (end > i && out_value(&cols[C_KEY], &cols[C_KEY_OFF], keys.p + i, end - i) < 0)
            return -1;
        i = end + 1;
    }
    return out_i32(&cols[C_KEYS_OFF], (int32_t)(cols[C_KEY_OFF].len / 4 - 1));
}

/* A timestamp in ms as microseconds; -1 with OverflowError when that does not fit an int64. */
static int to_us(int64_t ms, int64_t *us)
{
    if (__builtin_mul_overflow(ms, (int64_t)1000, us)) {
        PyErr_SetString(PyExc_OverflowError, "stored_columns: a timestamp in microseconds "
                                             "overflows int64");
        return -1;
    }
    return 0;
}

static int put_row(Out *cols, const unsigned char *m, Py_ssize_t pos, const StoredRead *r,
                   int want, Py_ssize_t row)
{
    Py_ssize_t tail = header_size(r->sys_flag) - HEADER_TAIL_SIZE;
    int64_t born, store;
    if (to_us(get_i64(m + BORNTIMESTAMP_AT), &born) < 0 ||
        to_us(get_i64(m + store_ts_at(r->sys_flag)), &store) < 0)
        return -1;
    if (out_i32(&cols[C_QID], get_i32(m + QUEUEID_AT)) < 0 ||
        out_i64(&cols[C_QOFF], get_i64(m + QUEUEOFFSET_AT)) < 0 ||
        out_i64(&cols[C_BORN], born) < 0 || out_i64(&cols[C_STORE], store) < 0 ||
        out_i32(&cols[C_REC], get_i32(m + tail + TAIL_RECONSUMETIMES_AT)) < 0)
        return -1;
    if ((want & COLUMN_BODY) && put_body(cols, m, pos, r->sys_flag) < 0)
        return -1;
    if (want & COLUMN_TAGS) {
        if (row % 8 == 0 && out_put(&cols[C_TAGS_VALID], "", 1) < 0)
            return -1;
        if (r->found.tags.p != NULL)
            PyByteArray_AS_STRING(cols[C_TAGS_VALID].ba)[row / 8] |= (char)(1 << (row % 8));
        if (out_value(&cols[C_TAGS], &cols[C_TAGS_OFF], r->found.tags.p, r->found.tags.len) < 0)
            return -1;
    }
    if ((want & COLUMN_MSG_ID) && put_msg_id(cols, m, r) < 0)
        return -1;
    if ((want & COLUMN_KEYS) && put_keys(cols, r->found.keys) < 0)
        return -1;
    return 0;
}

/*
 * stored_columns(buf, end_offset, want) -> (count, rows, 15 bytearrays)
 * The twin of stored.stored_columns_py: the messages of a pull body below ``end_offset`` as
 * Arrow-shaped column buffers.
 */
static PyObject *py_stored_columns(PyObject *self, PyObject *args)
{
    PyObject *obj;
    long long end_offset;
    int want;
    if (!PyArg_ParseTuple(args, "OLi", &obj, &end_offset, &want))
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(obj, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    Out cols[C_COUNT];
    int made = 0;
    PyObject *result = NULL;
    for (; made < C_COUNT; made++) {
        Py_ssize_t cap = made == C_BODY ? buf.len : 0;
        if (out_init(&cols[made], cap) < 0)
            goto done;
    }
    if ((want & COLUMN_BODY) && out_i32(&cols[C_BODY_OFF], 0) < 0)
        goto done;
    if ((want & COLUMN_TAGS) && out_i32(&cols[C_TAGS_OFF], 0) < 0)
        goto done;
    if ((want & COLUMN_MSG_ID) && out_i32(&cols[C_ID_OFF], 0) < 0)
        goto done;
    if ((want & COLUMN_KEYS) && (out_i32(&cols[C_KEYS_OFF], 0) < 0 || out_i32(&cols[C_KEY_OFF], 0) < 0))
        goto done;
    const unsigned char *p = buf.buf;
    Py_ssize_t pos = 0, count = 0, rows = 0;
    StoredRead r;
    while (pos < buf.len) {
        const unsigned char *m = p + pos;
        if (buf.len - pos < BLANK_ENTRY_SIZE) {
            PyErr_Format(remote_protocol_error, "%zd trailing bytes after the last message",
                         buf.len - pos);
            goto done;
        }
        if (get_i32(m + MAGICCODE_AT) == BLANK_MAGIC_CODE)
            break;
        int ok = read_stored(m, buf.len - pos, &r);
        if (ok < 0)
            goto done;
        if (ok == 0) {
            raise_like_peek(obj, pos);
            goto done;
        }
        count++;
        if (get_i64(m + QUEUEOFFSET_AT) < end_offset) {
            if (put_row(cols, m, pos, &r, want, rows) < 0)
                goto done;
            rows++;
        }
        pos += r.total;
    }
    result = PyTuple_New(2 + C_COUNT);
    if (result == NULL)
        goto done;
    PyTuple_SET_ITEM(result, 0, PyLong_FromSsize_t(count));
    PyTuple_SET_ITEM(result, 1, PyLong_FromSsize_t(rows));
    for (int i = 0; i < C_COUNT; i++) {
        if (PyByteArray_Resize(cols[i].ba, cols[i].len) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, 2 + i, cols[i].ba);
        cols[i].ba = NULL;
    }
    if (PyTuple_GET_ITEM(result, 0) == NULL || PyTuple_GET_ITEM(result, 1) == NULL)
        Py_CLEAR(result);
done:
    for (int i = 0; i < made; i++)
        Py_XDECREF(cols[i].ba);
    PyBuffer_Release(&buf);
    return result;
}

/* zlib.crc32 of a buffer, through crc32_of: the body CRC every encoder here stores (exposed so
 * that tests hold each of its paths to zlib's). */
static PyObject *py_crc32(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32_of((const unsigned char *)buf.buf, buf.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(crc);
}

/* -- HMAC-SHA1 (_hmac_sha1.h), for the tests against hashlib -------------------------------- */

/* hmac_sha1(key, data, fips=False) -> bytes: the digest, by the FIPS rounds when ``fips`` is
 * true, else by the rounds sha1_pick chose (SHA-NI where the CPU has it). */
static PyObject *py_hmac_sha1(PyObject *self, PyObject *args)
{
    Py_buffer key, data;
    int fips = 0;
    if (!PyArg_ParseTuple(args, "y*y*|p", &key, &data, &fips))
        return NULL;
    int chosen = sha1_ni_ok;
    if (fips)
        sha1_ni_ok = 0;
    HmacKey k;
    Sha1 s;
    unsigned char digest[SHA1_DIGEST];
    hmac_sha1_key(&k, key.buf, (size_t)key.len);
    hmac_sha1_begin(&k, &s);
    sha1_update(&s, data.buf, (size_t)data.len);
    hmac_sha1_end(&k, &s, digest);
    sha1_ni_ok = chosen;
    secure_wipe(&k, sizeof k);
    PyBuffer_Release(&key);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, SHA1_DIGEST);
}

/* -- module ----------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"java_string_hash", py_java_string_hash, METH_O, "Java's String.hashCode of a str."},
    {"crc32", py_crc32, METH_O, "zlib.crc32 of a buffer (the stored body CRC's code)."},
    {"index_key_hash", (PyCFunction)(void (*)(void))py_index_key_hash, METH_FASTCALL,
     "abs(hashCode(topic + '#' + key)); 0 for Integer.MIN_VALUE."},
    {"encode_wire_batch", py_encode_wire_batch, METH_VARARGS,
     "Stored form of a batch body's messages; None when the broker must act on one."},
    {"check_wire_batch", py_check_wire_batch, METH_VARARGS,
     "encode_wire_batch's checks of a batch body, nothing encoded: (count, without UNIQ_KEY)."},
    {"encode_wire_single", py_encode_wire_single, METH_VARARGS,
     "Stored form of one message from its body and wire properties; None when the broker "
     "must act on them."},
    {"patch_positions", py_patch_positions, METH_VARARGS,
     "Queue offset, physical offset and store time of each message of an appended blob."},
    {"scan_stored", py_scan_stored, METH_VARARGS,
     "What dispatch needs of each stored message in a range."},
    {"dispatch_plan", py_dispatch_plan, METH_VARARGS,
     "A dispatch round's queue runs, delayed messages and index entries (_dispatch_plan.h)."},
    {"queue_runs", py_queue_runs, METH_VARARGS,
     "An unfiltered read of queue entries as runs of the commit log (_dispatch_plan.h)."},
    {"index_put", py_index_put, METH_VARARGS,
     "IndexFile.put_hash over planned index entries (_dispatch_plan.h)."},
    {"stored_columns", py_stored_columns, METH_VARARGS,
     "The messages of a pull body below an offset as Arrow-shaped column buffers."},
    {"encode_batch_columns", py_encode_batch_columns, METH_VARARGS,
     "A SEND_BATCH_MESSAGE body from columns (_column_batch.h, protocol/column_batch.py)."},
    {"hmac_sha1", py_hmac_sha1, METH_VARARGS,
     "HMAC-SHA1 digest of data under key (_hmac_sha1.h); fips=True: without SHA-NI."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "OrbitMQ's per-message byte work in C (optional).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc32_init();
    crc32_pick();
    sha1_pick();
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (zlib == NULL)
        return NULL;
    zlib_decompress = PyObject_GetAttrString(zlib, "decompress");
    Py_DECREF(zlib);
    if (zlib_decompress == NULL)
        return NULL;
    PyObject *errors = PyImport_ImportModule("orbitmq.errors");
    if (errors == NULL)
        return NULL;
    remote_protocol_error = PyObject_GetAttrString(errors, "RemoteProtocolError");
    Py_DECREF(errors);
    if (remote_protocol_error == NULL)
        return NULL;
    if (PyType_Ready(&FastPathType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "FastPath", (PyObject *)&FastPathType) < 0 ||
        PyModule_AddIntConstant(m, "STOP_PARTIAL", STOP_PARTIAL) < 0 ||
        PyModule_AddIntConstant(m, "STOP_DECLINED", STOP_DECLINED) < 0 ||
        PyModule_AddIntConstant(m, "STOP_SEGMENT_FULL", STOP_SEGMENT_FULL) < 0 ||
        PyModule_AddIntConstant(m, "CRC32_FROM_ZLIB", crc32_zlib != NULL) < 0 ||
        PyModule_AddIntConstant(m, "CRC32_CLMUL", crc32_clmul_ok) < 0 ||
        PyModule_AddIntConstant(m, "SHA1_NI", sha1_ni_ok) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
