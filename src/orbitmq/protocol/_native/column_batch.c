/*
 * encode_batch_columns: SEND_BATCH_MESSAGE bodies straight from columns (protocol/column_batch.py
 * is the Python twin and documents the arguments). Same bytes, same refusals (ClientError with
 * the same message) as encode_batch_columns_py; tests/unit/protocol/test_column_batch.py checks it.
 *
 * Every offset read from a buffer column is bounds-checked against its buffers before use.
 */
#include <stdarg.h>

#include "protocol/_native/entry_points.h"
#include "protocol/_native/stored_rules.h"

#define CB_ENTRY_OVERHEAD 22       /* head (5 x i32) + properties length (i16) */
#define CB_PROPERTIES_MAX 32767
#define CB_ROWS_MAX 0x10000
#define CB_ID_HEAD_MAX 256

static PyObject *cb_client_error;

/* type(o).__name__ (a static type's tp_name may carry its module). */
static const char *cb_type_name(PyObject *o)
{
    const char *name = Py_TYPE(o)->tp_name, *dot = strrchr(name, '.');
    return dot != NULL ? dot + 1 : name;
}

/* Raise orbitmq.errors.ClientError(fmt % ...); returns NULL. */
static PyObject *cb_fail(const char *fmt, ...)
{
    if (cb_client_error == NULL) {
        PyObject *errors = PyImport_ImportModule("orbitmq.errors");
        if (errors == NULL)
            return NULL;
        cb_client_error = PyObject_GetAttrString(errors, "ClientError");
        Py_DECREF(errors);
        if (cb_client_error == NULL)
            return NULL;
    }
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg != NULL) {
        PyErr_SetObject(cb_client_error, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

typedef struct {
    const char *name;
    PyObject *seq;              /* a list or tuple (borrowed), or NULL for buffers */
    Py_buffer offsets, data, validity;
    int opened;                 /* buffers held: release them */
    int has_validity;
    Py_ssize_t first, length;
} CbColumn;

static void cb_close(CbColumn *c)
{
    if (c->opened) {
        PyBuffer_Release(&c->offsets);
        PyBuffer_Release(&c->data);
        if (c->has_validity)
            PyBuffer_Release(&c->validity);
    }
    c->opened = 0;
}

static int cb_get_buffer(PyObject *col, const char *attr, Py_buffer *view, int *present)
{
    PyObject *obj = PyObject_GetAttrString(col, attr);
    if (obj == NULL)
        return -1;
    if (present != NULL && obj == Py_None) {
        *present = 0;
        Py_DECREF(obj);
        return 0;
    }
    int rc = PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS);
    Py_DECREF(obj);
    if (rc == 0 && present != NULL)
        *present = 1;
    return rc;
}

static Py_ssize_t cb_attr_ssize(PyObject *col, const char *attr)
{
    PyObject *obj = PyObject_GetAttrString(col, attr);
    if (obj == NULL)
        return -1;
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    Py_DECREF(obj);
    return v;
}

/* Open a column (a list/tuple, or a BufferColumn-shaped object); 0, or -1 with an error set. */
static int cb_open(CbColumn *c, PyObject *col, const char *name)
{
    memset(c, 0, sizeof(*c));
    c->name = name;
    if (PyList_Check(col) || PyTuple_Check(col)) {
        c->seq = col;
        c->length = PySequence_Fast_GET_SIZE(col);
        return 0;
    }
    if (!PyObject_HasAttrString(col, "offsets")) {
        cb_fail("column %s must be a list, a tuple or a BufferColumn, not %s", name,
                cb_type_name(col));
        return -1;
    }
    if (cb_get_buffer(col, "offsets", &c->offsets, NULL) < 0)
        return -1;
    if (cb_get_buffer(col, "data", &c->data, NULL) < 0) {
        PyBuffer_Release(&c->offsets);
        return -1;
    }
    if (cb_get_buffer(col, "validity", &c->validity, &c->has_validity) < 0) {
        PyBuffer_Release(&c->offsets);
        PyBuffer_Release(&c->data);
        return -1;
    }
    c->opened = 1;
    c->first = cb_attr_ssize(col, "offset");
    if (c->first == -1 && PyErr_Occurred())
        return -1;
    c->length = cb_attr_ssize(col, "length");
    if (c->length == -1 && PyErr_Occurred())
        return -1;
    if (c->first < 0 || c->length < 0) {
        cb_fail("column %s: negative offset or length", name);
        return -1;
    }
    if (c->offsets.len / 4 < c->first + c->length + 1) {
        cb_fail("column %s: offsets buffer too short for its rows", name);
        return -1;
    }
    if (c->has_validity && c->validity.len * 8 < c->first + c->length) {
        cb_fail("column %s: validity bitmap too short for its rows", name);
        return -1;
    }
    return 0;
}

/* A buffer column's value: 1 present (*p, *n), 0 null, -1 error. */
static int cb_raw(const CbColumn *c, Py_ssize_t row, const char **p, Py_ssize_t *n)
{
    Py_ssize_t i = c->first + row;
    if (c->has_validity && !((((const unsigned char *)c->validity.buf)[i >> 3] >> (i & 7)) & 1))
        return 0;
    int32_t lo, hi;
    memcpy(&lo, (const char *)c->offsets.buf + 4 * i, 4);
    memcpy(&hi, (const char *)c->offsets.buf + 4 * (i + 1), 4);
    if (lo < 0 || lo > hi || hi > c->data.len) {
        cb_fail("row %zd: column %s offsets out of its data", row, c->name);
        return -1;
    }
    *p = (const char *)c->data.buf + lo;
    *n = hi - lo;
    return 1;
}

static int cb_has_control(const char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if ((unsigned char)p[i] <= 2)
            return 1;
    return 0;
}

/* A str's UTF-8 (cached by the str); NULL with a ClientError "<what> is not UTF-8" if it has
 * lone surrogates. */
static const char *cb_utf8(PyObject *s, Py_ssize_t *n, Py_ssize_t row, const char *what,
                           PyObject *name)
{
    const char *p = PyUnicode_AsUTF8AndSize(s, n);
    if (p == NULL) {
        PyErr_Clear();
        if (name != NULL)
            cb_fail("row %zd: message property %R is not UTF-8", row, name);
        else
            cb_fail("row %zd: %s is not UTF-8", row, what);
    }
    return p;
}

/* keys/tags/id at index ``at``: 1 present (checked), 0 absent, -1 error (naming ``row``). */
static int cb_text(const CbColumn *c, Py_ssize_t at, Py_ssize_t row, const char **p,
                   Py_ssize_t *n)
{
    if (c->seq == NULL) {
        int got = cb_raw(c, at, p, n);
        if (got <= 0)
            return got;
        if (!utf8_valid((const unsigned char *)*p, *n)) {
            cb_fail("row %zd: %s is not UTF-8", row, c->name);
            return -1;
        }
    } else {
        PyObject *v = PySequence_Fast_GET_ITEM(c->seq, at);
        if (v == Py_None)
            return 0;
        if (!PyUnicode_Check(v)) {
            cb_fail("row %zd: %s must be str, not %s", row, c->name, cb_type_name(v));
            return -1;
        }
        if ((*p = cb_utf8(v, n, row, c->name, NULL)) == NULL)
            return -1;
    }
    if (cb_has_control(*p, *n)) {
        cb_fail("row %zd: %s holds a NUL or a separator character", row, c->name);
        return -1;
    }
    return 1;
}

/* A row's body; a non-contiguous buffer is copied into *copy (the caller releases it). */
static int cb_body(const CbColumn *c, Py_ssize_t row, Py_ssize_t size_max, const char **p,
                   Py_ssize_t *n, PyObject **copy)
{
    if (c->seq == NULL) {
        int got = cb_raw(c, row, p, n);
        if (got < 0)
            return -1;
        if (got == 0) {
            cb_fail("row %zd: message body is null", row);
            return -1;
        }
    } else {
        PyObject *v = PySequence_Fast_GET_ITEM(c->seq, row);
        if (v == Py_None) {
            cb_fail("row %zd: message body is null", row);
            return -1;
        }
        if (PyBytes_Check(v)) {
            *p = PyBytes_AS_STRING(v);
            *n = PyBytes_GET_SIZE(v);
        } else if (PyByteArray_Check(v) || PyMemoryView_Check(v)) {
            *copy = PyBytes_FromObject(v);
            if (*copy == NULL)
                return -1;
            *p = PyBytes_AS_STRING(*copy);
            *n = PyBytes_GET_SIZE(*copy);
        } else {
            cb_fail("row %zd: message body must be bytes, not %s", row, cb_type_name(v));
            return -1;
        }
    }
    if (*n == 0) {
        cb_fail("row %zd: message body is empty", row);
        return -1;
    }
    if (*n > size_max) {
        cb_fail("row %zd: message body of %zd bytes exceeds the maximum %zd", row, *n, size_max);
        return -1;
    }
    return 0;
}

/* A growing byte buffer. */
typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} CbOut;

static int cb_room(CbOut *o, Py_ssize_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + n)
        cap *= 2;
    char *grown = PyMem_Realloc(o->buf, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = grown;
    o->cap = cap;
    return 0;
}

static void cb_put(CbOut *o, const void *p, Py_ssize_t n)
{
    memcpy(o->buf + o->len, p, (size_t)n);
    o->len += n;
}

static void cb_be32(char *at, int32_t v)
{
    uint32_t u = (uint32_t)v;
    at[0] = (char)(u >> 24);
    at[1] = (char)(u >> 16);
    at[2] = (char)(u >> 8);
    at[3] = (char)u;
}

/* The user properties of one row, appended to *props as name\x01value\x02... */
static int cb_user_properties(PyObject *dict, Py_ssize_t row, PyObject *reserved, CbOut *props)
{
    if (dict == Py_None)
        return 0;
    if (!PyDict_Check(dict)) {
        cb_fail("row %zd: properties must be a dict or None, not %s", row, cb_type_name(dict));
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(dict, &pos, &name, &value)) {
        if (!PyUnicode_Check(name) || !PyUnicode_Check(value)) {
            cb_fail("row %zd: message property names and values must be str", row);
            return -1;
        }
        if (PyUnicode_GET_LENGTH(name) == 0) {
            cb_fail("row %zd: a message property has an empty name", row);
            return -1;
        }
        int is_reserved = PySet_Contains(reserved, name);
        if (is_reserved != 0) {
            if (is_reserved > 0)
                cb_fail("row %zd: message property %R is reserved by the system", row, name);
            return -1;
        }
        Py_ssize_t nn, vn;
        const char *np = cb_utf8(name, &nn, row, NULL, name);
        if (np == NULL)
            return -1;
        const char *vp = cb_utf8(value, &vn, row, NULL, name);
        if (vp == NULL)
            return -1;
        if (cb_has_control(np, nn) || cb_has_control(vp, vn)) {
            cb_fail("row %zd: message property %R holds a reserved character "
                    "(\\x00, \\x01 or \\x02)", row, name);
            return -1;
        }
        if (cb_room(props, nn + vn + 2) < 0)
            return -1;
        cb_put(props, np, nn);
        cb_put(props, "\x01", 1);
        cb_put(props, vp, vn);
        cb_put(props, "\x02", 1);
    }
    return 0;
}

typedef struct {
    int block;                  /* an IdBlock (head, counter) rather than a list */
    const char *head;
    Py_ssize_t head_len;
    unsigned long counter;
    CbColumn list;
} CbIds;

static int cb_ids_open(CbIds *ids, PyObject *obj)
{
    memset(ids, 0, sizeof(*ids));
    if (PyTuple_Check(obj)) {
        PyObject *head, *counter;
        if (PyTuple_GET_SIZE(obj) != 2 || !PyUnicode_Check(head = PyTuple_GET_ITEM(obj, 0))
                || !PyLong_Check(counter = PyTuple_GET_ITEM(obj, 1))) {
            cb_fail("an id block is (head: str, counter: int)");
            return -1;
        }
        ids->block = 1;
        ids->head = PyUnicode_AsUTF8AndSize(head, &ids->head_len);
        if (ids->head == NULL)
            PyErr_Clear();
        if (ids->head == NULL || !PyUnicode_IS_ASCII(head) ||
                cb_has_control(ids->head, ids->head_len)) {
            cb_fail("an id block's head must be ASCII without separators");
            return -1;
        }
        if (ids->head_len > CB_ID_HEAD_MAX) {
            cb_fail("an id block's head is longer than %d characters", CB_ID_HEAD_MAX);
            return -1;
        }
        ids->counter = PyLong_AsUnsignedLongMask(counter);
        if (ids->counter == (unsigned long)-1 && PyErr_Occurred())
            return -1;
        return 0;
    }
    if (!PyList_Check(obj)) {
        cb_fail("ids must be an IdBlock or a list of str, not %s", cb_type_name(obj));
        return -1;
    }
    return cb_open(&ids->list, obj, "message id");
}

/* The id of row ``row`` (the k-th taken): into buf for a block, else from the list. */
static int cb_id(CbIds *ids, Py_ssize_t k, Py_ssize_t row, char *buf, const char **p,
                 Py_ssize_t *n)
{
    if (ids->block) {
        static const char hex[] = "0123456789ABCDEF";
        unsigned v = (unsigned)((ids->counter + (unsigned long)k) & 0xFFFF);
        memcpy(buf, ids->head, (size_t)ids->head_len);
        for (int d = 0; d < 4; d++)
            buf[ids->head_len + d] = hex[(v >> (12 - 4 * d)) & 0xF];
        *p = buf;
        *n = ids->head_len + 4;
        return 0;
    }
    if (k >= ids->list.length) {
        cb_fail("row %zd: no message id (ids has %zd)", row, ids->list.length);
        return -1;
    }
    int got = cb_text(&ids->list, k, row, p, n);
    if (got < 0)
        return -1;
    if (got == 0 || *n == 0) {
        cb_fail("row %zd: message id is empty", row);
        return -1;
    }
    return 0;
}

static int cb_flag(PyObject *flags, Py_ssize_t row, int32_t *flag)
{
    *flag = 0;
    if (flags == NULL)
        return 0;
    PyObject *v = PySequence_Fast_GET_ITEM(flags, row);
    int overflow = 0;
    long long f = PyLong_Check(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
    if (!PyLong_Check(v) || overflow || f < INT32_MIN || f > INT32_MAX) {
        cb_fail("row %zd: flag %R does not fit a signed 32-bit field", row, v);
        return -1;
    }
    *flag = (int32_t)f;
    return 0;
}

typedef struct {
    CbColumn bodies, keys, tags;
    int has_keys, has_tags;
    PyObject *props, *flags;    /* lists/tuples or NULL (borrowed) */
    CbIds ids;
    PyObject *reserved;
    Py_ssize_t start, rows_max, bytes_max, size_max;
} CbArgs;

/* One row appended to out (and its id to ids_out); 1 taken, 0 does not fit, -1 error. */
static int cb_row(CbArgs *a, Py_ssize_t row, Py_ssize_t k, CbOut *out, CbOut *props,
                  CbOut *ids_out)
{
    const char *body, *tag = NULL, *key = NULL, *id;
    Py_ssize_t body_n, tag_n = 0, key_n = 0, id_n;
    char id_buf[CB_ID_HEAD_MAX + 4];
    PyObject *copy = NULL;
    int32_t flag;
    int rc = -1;
    if (cb_body(&a->bodies, row, a->size_max, &body, &body_n, &copy) < 0)
        goto done;
    if (a->has_tags && cb_text(&a->tags, row, row, &tag, &tag_n) < 0)
        goto done;
    if (a->has_keys && cb_text(&a->keys, row, row, &key, &key_n) < 0)
        goto done;
    props->len = 0;
    if (a->props != NULL &&
            cb_user_properties(PySequence_Fast_GET_ITEM(a->props, row), row, a->reserved, props) < 0)
        goto done;
    if (cb_id(&a->ids, k, row, id_buf, &id, &id_n) < 0 || cb_flag(a->flags, row, &flag) < 0)
        goto done;
    if (cb_room(props, tag_n + key_n + id_n + 32) < 0)
        goto done;
    if (tag_n > 0) {
        cb_put(props, "TAGS\x01", 5);
        cb_put(props, tag, tag_n);
        cb_put(props, "\x02", 1);
    }
    if (key_n > 0) {
        cb_put(props, "KEYS\x01", 5);
        cb_put(props, key, key_n);
        cb_put(props, "\x02", 1);
    }
    cb_put(props, "UNIQ_KEY\x01", 9);
    cb_put(props, id, id_n);
    cb_put(props, "\x02WAIT\x01true\x02", 11);
    if (props->len > CB_PROPERTIES_MAX) {
        cb_fail("row %zd: message properties of %zd bytes exceed %d", row, props->len,
                CB_PROPERTIES_MAX);
        goto done;
    }
    Py_ssize_t entry = CB_ENTRY_OVERHEAD + body_n + props->len;
    if (k > 0 && out->len + entry > a->bytes_max) {
        rc = 0;
        goto done;
    }
    if (out->len + entry > a->size_max) {
        cb_fail("row %zd: message of %zd bytes exceeds the maximum %zd", row, entry, a->size_max);
        goto done;
    }
    if (cb_room(out, entry) < 0 || cb_room(ids_out, id_n + 1) < 0)
        goto done;
    char *at = out->buf + out->len;
    cb_be32(at, (int32_t)entry);
    memset(at + 4, 0, 8);
    cb_be32(at + 12, flag);
    cb_be32(at + 16, (int32_t)body_n);
    memcpy(at + 20, body, (size_t)body_n);
    at[20 + body_n] = (char)(props->len >> 8);
    at[21 + body_n] = (char)props->len;
    memcpy(at + 22 + body_n, props->buf, (size_t)props->len);
    out->len += entry;
    if (k > 0)
        cb_put(ids_out, ",", 1);
    cb_put(ids_out, id, id_n);
    rc = 1;
done:
    Py_XDECREF(copy);
    return rc;
}

/* Column shapes and limits, in the Python twin's order. */
static int cb_check(CbArgs *a)
{
    Py_ssize_t n = a->bodies.length;
    PyObject *seqs[] = {a->props, a->flags};
    const char *names[] = {"properties", "flags"};
    Py_ssize_t lens[] = {0, 0};
    for (int i = 0; i < 2; i++) {
        if (seqs[i] == NULL)
            continue;
        if (PyList_Check(seqs[i]) || PyTuple_Check(seqs[i])) {
            lens[i] = PySequence_Fast_GET_SIZE(seqs[i]);
            continue;
        }
        if (!PyObject_HasAttrString(seqs[i], "offsets")) {
            cb_fail("column %s must be a list, a tuple or a BufferColumn, not %s", names[i],
                    cb_type_name(seqs[i]));
            return -1;
        }
        lens[i] = cb_attr_ssize(seqs[i], "length");
        if (lens[i] == -1 && PyErr_Occurred())
            return -1;
    }
    const CbColumn *cols[] = {a->has_keys ? &a->keys : NULL, a->has_tags ? &a->tags : NULL};
    for (int i = 0; i < 2; i++)
        if (cols[i] != NULL && cols[i]->length != n) {
            cb_fail("column %s has %zd rows, body %zd", cols[i]->name, cols[i]->length, n);
            return -1;
        }
    for (int i = 0; i < 2; i++)
        if (seqs[i] != NULL && lens[i] != n) {
            cb_fail("column %s has %zd rows, body %zd", names[i], lens[i], n);
            return -1;
        }
    for (int i = 0; i < 2; i++)
        if (seqs[i] != NULL && !PyList_Check(seqs[i]) && !PyTuple_Check(seqs[i])) {
            cb_fail("properties and flags must be lists or tuples");
            return -1;
        }
    if (a->rows_max < 1 || a->rows_max > CB_ROWS_MAX) {
        cb_fail("rows_max must be 1..%d, got %zd", CB_ROWS_MAX, a->rows_max);
        return -1;
    }
    if (a->bytes_max < 1 || a->bytes_max > a->size_max) {
        cb_fail("bytes_max must be 1..message_size_max (%zd), got %zd", a->size_max, a->bytes_max);
        return -1;
    }
    if (a->start < 0 || a->start >= n) {
        cb_fail("batch is empty: no row from %zd of %zd", a->start, n);
        return -1;
    }
    return 0;
}

PyObject *py_encode_batch_columns(PyObject *self, PyObject *args)
{
    PyObject *bodies, *keys, *tags, *props, *flags, *ids;
    CbArgs a;
    memset(&a, 0, sizeof(a));
    if (!PyArg_ParseTuple(args, "OOOOOOnnnnO!:encode_batch_columns", &bodies, &keys, &tags,
                          &props, &flags, &ids, &a.start, &a.rows_max, &a.bytes_max, &a.size_max,
                          &PyFrozenSet_Type, &a.reserved))
        return NULL;
    CbOut out = {0}, props_out = {0}, ids_out = {0};
    PyObject *result = NULL;
    if (cb_open(&a.bodies, bodies, "body") < 0)
        goto done;
    if (keys != Py_None) {
        a.has_keys = 1;
        if (cb_open(&a.keys, keys, "keys") < 0)
            goto done;
    }
    if (tags != Py_None) {
        a.has_tags = 1;
        if (cb_open(&a.tags, tags, "tags") < 0)
            goto done;
    }
    a.props = props == Py_None ? NULL : props;
    a.flags = flags == Py_None ? NULL : flags;
    if (cb_check(&a) < 0 || cb_ids_open(&a.ids, ids) < 0)
        goto done;
    Py_ssize_t n = a.bodies.length, row = a.start;
    if (cb_room(&out, a.bytes_max < (1 << 20) ? a.bytes_max : (1 << 20)) < 0)
        goto done;
    while (row < n && row - a.start < a.rows_max) {
        int took = cb_row(&a, row, row - a.start, &out, &props_out, &ids_out);
        if (took < 0)
            goto done;
        if (took == 0)
            break;
        row++;
    }
    {
        PyObject *body = PyBytes_FromStringAndSize(out.buf, out.len);
        PyObject *msg_ids = body ? PyUnicode_DecodeUTF8(ids_out.buf ? ids_out.buf : "",
                                                        ids_out.len, "strict") : NULL;
        if (body != NULL && msg_ids != NULL)
            result = Py_BuildValue("(NnN)", body, row - a.start, msg_ids);
        else {
            Py_XDECREF(body);
            Py_XDECREF(msg_ids);
        }
    }
done:
    cb_close(&a.bodies);
    cb_close(&a.keys);
    cb_close(&a.tags);
    cb_close(&a.ids.list);
    PyMem_Free(out.buf);
    PyMem_Free(props_out.buf);
    PyMem_Free(ids_out.buf);
    return result;
}
