/*
 * stored_columns.c: the C twin of stored.stored_columns_py: the messages of a pull body below an
 * offset as Arrow-shaped column buffers (the read of stored_rules.c, the bodies' CRC checked by
 * stored_encode.c's crc32_of, compressed bodies inflated by zlib.decompress).
 */
#include "protocol/_native/entry_points.h"
#include "protocol/_native/stored_encode.h"

/* -- bulk decode: a pull body as Arrow-shaped columns (stored._columns) -------------------- */

#define COLUMN_BODY 1
#define COLUMN_TAGS 2
#define COLUMN_MSG_ID 4
#define COLUMN_KEYS 8
#define COLUMNS_DATA_MAX 0x7FFFFFFF
#define SYSFLAG_COMPRESSED 1

static PyObject *zlib_decompress;  /* zlib.decompress */

/* zlib.decompress, kept once by the room's init (stored_columns_init) */
int stored_columns_init(void)
{
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (zlib == NULL)
        return -1;
    zlib_decompress = PyObject_GetAttrString(zlib, "decompress");
    Py_DECREF(zlib);
    return zlib_decompress == NULL ? -1 : 0;
}

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
PyObject *py_stored_columns(PyObject *self, PyObject *args)
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
