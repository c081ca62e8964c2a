/*
 * orbitmq.protocol._speedups: the broker's per-message byte work, in C.
 *
 * Optional: every function here has a Python twin (or a general Python path that takes over
 * when a function answers None), and the tests check that both give the same bytes. The build
 * hook (hatch_build.py) compiles this file when a C compiler is present; without it, or with
 * ORBITMQ_PURE_PYTHON=1, OrbitMQ runs the Python code only.
 *
 * Functions take the same inputs as their Python twins and decline (return None) on anything
 * unusual, so that the Python code keeps defining what is accepted and which error is raised.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *zlib_crc32;  /* zlib.crc32, so that no zlib headers are needed to build */

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

/* -- properties ----------------------------------------------------------------------------- */

/* Strict UTF-8, as Python's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
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

/*
 * Properties the store may copy as they came: what encoding the decoded dict again would give
 * back byte for byte. Every item "name\x01value\x02" with a non-empty name, no NUL, valid UTF-8,
 * no name twice, and neither DELAY nor TRAN_MSG=true (those messages take the general path,
 * which refuses them in a batch). Returns 1 when canonical, 0 otherwise.
 */
#define MAX_NAMES 32

static int batch_props_canonical(const unsigned char *p, Py_ssize_t n)
{
    if (n == 0)
        return 1;
    if (p[n - 1] != 0x02 || memchr(p, 0, (size_t)n) != NULL || !utf8_valid(p, n))
        return 0;
    const unsigned char *names[MAX_NAMES];
    Py_ssize_t lens[MAX_NAMES];
    int count = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        const unsigned char *item = p + i;
        const unsigned char *end = memchr(item, 0x02, (size_t)(n - i));  /* found: p ends with it */
        Py_ssize_t item_len = end - item;
        const unsigned char *sep = memchr(item, 0x01, (size_t)item_len);
        if (sep == NULL || sep == item)
            return 0;  /* no separator or empty name: the general path drops the item */
        Py_ssize_t name_len = sep - item;
        const unsigned char *value = sep + 1;
        Py_ssize_t value_len = item_len - name_len - 1;
        if (memchr(value, 0x01, (size_t)value_len) != NULL)
            return 0;  /* would not encode back the same way */
        if (name_len == 5 && memcmp(item, "DELAY", 5) == 0)
            return 0;
        if (name_len == 8 && memcmp(item, "TRAN_MSG", 8) == 0)
            return 0;
        if (count == MAX_NAMES)
            return 0;
        for (int k = 0; k < count; k++)
            if (lens[k] == name_len && memcmp(names[k], item, (size_t)name_len) == 0)
                return 0;
        names[count] = item;
        lens[count] = name_len;
        count++;
        i += item_len + 1;
    }
    return 1;
}

/* -- batch body -> stored messages ---------------------------------------------------------- */

#define BATCH_ENTRY_OVERHEAD 22  /* total, magic, crc, flag, body length (i32 each) + i16 */
#define MAGIC_CODE ((int32_t)0xDAA320A7)

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

/* The fixed fields every encoder here shares: one message's context besides its own bytes. */
typedef struct {
    Py_buffer topic, born, store;
    int queue_id, sys_flag, reconsume;
    long long born_ts;
} StoreContext;

static Py_ssize_t head_size(const StoreContext *c)
{
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + c->born.len + 8 + c->store.len + 4 + 8 + 4;
}

static int context_ok(const StoreContext *c)
{
    return (c->born.len == 8 || c->born.len == 20) && (c->store.len == 8 || c->store.len == 20) &&
           c->topic.len >= 2;
}

static void release_context(StoreContext *c)
{
    PyBuffer_Release(&c->topic);
    PyBuffer_Release(&c->born);
    PyBuffer_Release(&c->store);
}

/* One message in stored form at ``w`` (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP zero);
 * returns its size, or -1 with an exception set. */
static Py_ssize_t write_stored(unsigned char *w, const StoreContext *c, int32_t flag,
                               const unsigned char *body, Py_ssize_t body_len,
                               const unsigned char *props, Py_ssize_t props_len)
{
    int32_t crc;
    if (body_crc(body, body_len, &crc) < 0)
        return -1;
    Py_ssize_t stored = head_size(c) + body_len + c->topic.len + 2 + props_len;
    put_i32(w, (int32_t)stored);
    put_i32(w + 4, MAGIC_CODE);
    put_i32(w + 8, crc);
    put_i32(w + 12, c->queue_id);
    put_i32(w + 16, flag);
    put_i64(w + 20, 0);  /* QUEUEOFFSET */
    put_i64(w + 28, 0);  /* PHYSICALOFFSET */
    put_i32(w + 36, c->sys_flag);
    put_i64(w + 40, c->born_ts);
    w += 48;
    memcpy(w, c->born.buf, (size_t)c->born.len);
    w += c->born.len;
    put_i64(w, 0);  /* STORETIMESTAMP */
    w += 8;
    memcpy(w, c->store.buf, (size_t)c->store.len);
    w += c->store.len;
    put_i32(w, c->reconsume);
    put_i64(w + 4, 0);  /* PREPAREDTRANSACTIONOFFSET */
    put_i32(w + 12, (int32_t)body_len);
    w += 16;
    memcpy(w, body, (size_t)body_len);
    w += body_len;
    memcpy(w, c->topic.buf, (size_t)c->topic.len);
    w += c->topic.len;
    w[0] = (unsigned char)((uint16_t)props_len >> 8);
    w[1] = (unsigned char)props_len;
    memcpy(w + 2, props, (size_t)props_len);
    return stored;
}

/*
 * encode_wire_batch(body, topic_part, queue_id, sys_flag, born_timestamp, born_host, store_host,
 *                   reconsume_times, max_message_size, max_blob_size)
 *     -> (bytearray blob, list of relative positions) | None
 *
 * The stored form of every message of a SEND_BATCH_MESSAGE body, back to back, with QUEUEOFFSET,
 * PHYSICALOFFSET and STORETIMESTAMP left zero for the append to patch. born_host and store_host
 * are the packed ip + i32 port (8 or 20 bytes); sys_flag already carries their v6 bits;
 * topic_part is the u8 length + topic. None: the general path must decide (malformed entry,
 * properties that are not canonical, a body over the limit, an empty batch, a blob too big).
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
    Py_ssize_t end = body.len, pos = 0, out_size = 0, count = 0;

    if (!context_ok(&c) || end == 0)
        goto decline;
    /* pass 1: validate and size */
    while (pos < end) {
        Py_ssize_t left = end - pos;
        if (left < BATCH_ENTRY_OVERHEAD)
            goto decline;
        int32_t total = get_i32(b + pos), body_len = get_i32(b + pos + 16);
        if (body_len < 0 || body_len > left - BATCH_ENTRY_OVERHEAD || body_len > max_message_size)
            goto decline;
        int16_t props_len = get_i16(b + pos + 20 + body_len);
        if (props_len < 0 || props_len > left - BATCH_ENTRY_OVERHEAD - body_len)
            goto decline;
        if (total != BATCH_ENTRY_OVERHEAD + body_len + props_len)
            goto decline;
        if (!batch_props_canonical(b + pos + 22 + body_len, props_len))
            goto decline;
        out_size += head_size(&c) + body_len + c.topic.len + 2 + props_len;
        if (out_size > max_blob_size)
            goto decline;
        pos += total;
        count++;
    }
    blob = PyByteArray_FromStringAndSize(NULL, out_size);
    rels = PyList_New(count);
    if (blob == NULL || rels == NULL)
        goto error;
    /* pass 2: write */
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(blob);
    Py_ssize_t at = 0;
    pos = 0;
    for (Py_ssize_t i = 0; pos < end; i++) {
        int32_t total = get_i32(b + pos), body_len = get_i32(b + pos + 16);
        const unsigned char *msg_body = b + pos + 20;
        PyObject *rel = PyLong_FromSsize_t(at);
        if (rel == NULL)
            goto error;
        PyList_SET_ITEM(rels, i, rel);
        Py_ssize_t stored = write_stored(o + at, &c, get_i32(b + pos + 12), msg_body, body_len,
                                         msg_body + body_len + 2, get_i16(msg_body + body_len));
        if (stored < 0)
            goto error;
        at += stored;
        pos += total;
    }
    result = PyTuple_Pack(2, blob, rels);
    goto done;
decline:
    result = Py_NewRef(Py_None);
    goto done;
error:
    result = NULL;
done:
    Py_XDECREF(blob);
    Py_XDECREF(rels);
    PyBuffer_Release(&body);
    release_context(&c);
    return result;
}

/*
 * encode_wire_single(body, properties, flag, topic_part, queue_id, sys_flag, born_timestamp,
 *                    born_host, store_host, reconsume_times) -> bytearray | None
 *
 * One SEND_MESSAGE(_V2)'s stored form from its body and the header's properties (UTF-8, as
 * sent); None when the properties are not canonical (see batch_props_canonical) or hold DELAY
 * or TRAN_MSG: the general path then parses them into a dict and decides.
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
    if (!context_ok(&c) || props.len > 0x7FFF || !batch_props_canonical(props.buf, props.len)) {
        blob = Py_NewRef(Py_None);
        goto done;
    }
    blob = PyByteArray_FromStringAndSize(NULL, head_size(&c) + body.len + c.topic.len + 2 +
                                                   props.len);
    if (blob == NULL)
        goto done;
    if (write_stored((unsigned char *)PyByteArray_AS_STRING(blob), &c, flag, body.buf, body.len,
                     props.buf, props.len) < 0)
        Py_CLEAR(blob);
done:
    PyBuffer_Release(&body);
    PyBuffer_Release(&props);
    release_context(&c);
    return blob;
}

/*
 * patch_batch(buf, pos, phy, queue_offset, now, rel_positions, store_ts_at) -> next queue offset
 *
 * QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of every message of an appended batch whose
 * messages all take a queue offset and share one header layout (a batch send's).
 */
static PyObject *py_patch_batch(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, ts_at;
    long long phy, qoff, now;
    PyObject *rels;
    if (!PyArg_ParseTuple(args, "w*nLLLO!n", &buf, &pos, &phy, &qoff, &now, &PyList_Type, &rels,
                          &ts_at))
        return NULL;
    unsigned char *p = buf.buf;
    Py_ssize_t n = PyList_GET_SIZE(rels);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t rel = PyLong_AsSsize_t(PyList_GET_ITEM(rels, i));
        if (rel == -1 && PyErr_Occurred())
            goto error;
        if (rel < 0 || pos + rel + ts_at + 8 > buf.len || pos + rel + 36 > buf.len) {
            PyErr_SetString(PyExc_ValueError, "patch_batch: position outside the buffer");
            goto error;
        }
        unsigned char *m = p + pos + rel;
        put_i64(m + 20, qoff + i);
        put_i64(m + 28, phy + rel);
        put_i64(m + ts_at, now);
    }
    PyBuffer_Release(&buf);
    return PyLong_FromLongLong(qoff + n);
error:
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- dispatch: stored messages -> queue and index entries ------------------------------------ */

static const unsigned char *find_prop(const unsigned char *p, Py_ssize_t n, const char *name,
                                      Py_ssize_t name_len, Py_ssize_t *value_len)
{
    /* name followed by \x01, at the start or after \x02; value up to the next \x02 or the end */
    Py_ssize_t i = 0;
    while (i + name_len < n) {
        const unsigned char *hit = memchr(p + i, (unsigned char)name[0], (size_t)(n - i));
        if (hit == NULL)
            return NULL;
        Py_ssize_t at = hit - p;
        if (at + name_len >= n)
            return NULL;
        if ((at == 0 || p[at - 1] == 0x02) && memcmp(hit, name, (size_t)name_len) == 0 &&
            p[at + name_len] == 0x01) {
            const unsigned char *v = hit + name_len + 1;
            const unsigned char *stop = memchr(v, 0x02, (size_t)(n - (at + name_len + 1)));
            *value_len = (stop ? stop : p + n) - v;
            return v;
        }
        i = at + 1;
    }
    return NULL;
}

static PyObject *prop_str(const unsigned char *props, Py_ssize_t n, const char *name)
{
    Py_ssize_t len;
    const unsigned char *v = find_prop(props, n, name, (Py_ssize_t)strlen(name), &len);
    if (v == NULL)
        return Py_NewRef(Py_None);
    return PyUnicode_DecodeUTF8((const char *)v, len, "replace");
}

/*
 * scan_stored(buf, pos, limit, count_max) -> (records, pos reached, count, stop)
 *
 * Reads stored messages from ``pos`` while pos < limit and count < count_max. records holds,
 * for each message that takes a queue entry (prepared and rolled-back transaction messages
 * take none but are counted), the tuple
 *     (pos, total, queue_id, queue_offset, store_timestamp, topic bytes, tags code,
 *      KEYS or None, UNIQ_KEY or None, DELAY or None)
 * with property values decoded as UTF-8 with replacement, like the Python dispatcher.
 * stop: 0 limit or count reached, 1 blank entry (the segment's end), 2 bad entry at pos.
 */
#define BLANK_MAGIC ((int32_t)0xCBD43194)

static PyObject *py_scan_stored(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, limit, count_max;
    if (!PyArg_ParseTuple(args, "y*nnn", &buf, &pos, &limit, &count_max))
        return NULL;
    const unsigned char *p = buf.buf;
    if (limit > buf.len)
        limit = buf.len;
    PyObject *records = PyList_New(0);
    if (records == NULL)
        goto error;
    Py_ssize_t count = 0;
    int stop = 0;
    while (pos < limit && count < count_max) {
        if (pos + 8 > buf.len) {
            stop = 2;
            break;
        }
        int32_t total = get_i32(p + pos), magic = get_i32(p + pos + 4);
        if (magic == BLANK_MAGIC) {
            stop = 1;
            break;
        }
        if (magic != MAGIC_CODE || total <= 0 || pos + total > buf.len || total < 91) {
            stop = 2;
            break;
        }
        const unsigned char *m = p + pos;
        int32_t sys_flag = get_i32(m + 36);
        Py_ssize_t born_len = (sys_flag & 16) ? 20 : 8, store_len = (sys_flag & 32) ? 20 : 8;
        Py_ssize_t head = 48 + born_len + 8 + store_len + 16;
        Py_ssize_t ts_at = 48 + born_len;
        int32_t body_len = get_i32(m + head - 4);
        if (body_len < 0 || head + body_len + 3 > total) {
            stop = 2;
            break;
        }
        count++;
        int tx_type = sys_flag & 12;
        if (tx_type == 4 || tx_type == 12) {  /* prepared, rolled back: no queue entry */
            pos += total;
            continue;
        }
        Py_ssize_t at = head + body_len;
        Py_ssize_t topic_len = m[at];
        if (at + 1 + topic_len + 2 > total) {
            count--;
            stop = 2;
            break;
        }
        const unsigned char *topic = m + at + 1;
        at += 1 + topic_len;
        Py_ssize_t props_len = get_i16(m + at);
        if (props_len < 0 || at + 2 + props_len > total) {
            count--;
            stop = 2;
            break;
        }
        const unsigned char *props = m + at + 2;
        long tags_code = 0;
        PyObject *keys = NULL, *uniq = NULL, *delay = NULL, *rec = NULL;
        if (props_len > 0) {
            PyObject *tags = prop_str(props, props_len, "TAGS");
            if (tags == NULL)
                goto error;
            if (tags != Py_None)
                tags_code = java_hash_unicode(tags);
            Py_DECREF(tags);
            keys = prop_str(props, props_len, "KEYS");
            uniq = prop_str(props, props_len, "UNIQ_KEY");
            delay = prop_str(props, props_len, "DELAY");
        } else {
            keys = Py_NewRef(Py_None);
            uniq = Py_NewRef(Py_None);
            delay = Py_NewRef(Py_None);
        }
        if (keys != NULL && uniq != NULL && delay != NULL)
            rec = Py_BuildValue("(nniLLy#lNNN)", pos, (Py_ssize_t)total, (int)get_i32(m + 12),
                                (long long)get_i64(m + 20), (long long)get_i64(m + ts_at),
                                (const char *)topic, topic_len, tags_code, keys, uniq, delay);
        else {
            Py_XDECREF(keys);
            Py_XDECREF(uniq);
            Py_XDECREF(delay);
        }
        if (rec == NULL)
            goto error;
        int r = PyList_Append(records, rec);
        Py_DECREF(rec);
        if (r < 0)
            goto error;
        pos += total;
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
     "Stored form of a batch body's messages, or None for the general path."},
    {"encode_wire_single", py_encode_wire_single, METH_VARARGS,
     "Stored form of one message from its body and wire properties, or None."},
    {"patch_batch", py_patch_batch, METH_VARARGS,
     "Queue offset, physical offset and store time of an appended uniform batch."},
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
    return PyModule_Create(&module);
}
