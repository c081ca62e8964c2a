/*
 * stored_twins.c: the C twins of the stored codec's hot functions, orbitmq/protocol/stored/
 * (encode_wire_single, encode_wire_batch, check_wire_batch, patch_positions, scan_stored): each
 * takes the same arguments as its Python twin (``*_py`` in the stored package) and gives the same
 * bytes, the same None and the same refusals (RemoteProtocolError with the same message,
 * ValueError, OverflowError); tests/unit/protocol/test_stored_twins.py checks it. The encoding is
 * stored_encode.c's, the rules stored_rules.c's.
 */
#include "protocol/_native/entry_points.h"
#include "protocol/_native/java_hash.h"
#include "protocol/_native/stored_encode.h"
#include "protocol/_native/stored_twins.h"

/* -- encoding: the twins' Python faces over stored_encode.c ----------------------------------- */

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
PyObject *py_encode_wire_single(PyObject *self, PyObject *args)
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
PyObject *py_encode_wire_batch(PyObject *self, PyObject *args)
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
PyObject *py_check_wire_batch(PyObject *self, PyObject *args)
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
PyObject *py_patch_positions(PyObject *self, PyObject *args)
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
PyObject *scan_record(const unsigned char *m, Py_ssize_t pos, const StoredRead *r)
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
PyObject *py_scan_stored(PyObject *self, PyObject *args)
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
