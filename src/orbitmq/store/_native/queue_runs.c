/*
 * queue_runs.c: reading a queue: its entries as runs of the commit log (store/queue_reader.py).
 */
#include "protocol/_native/stored_rules.h"
#include "store/_native/entry_points.h"
#include "store/_native/store_layout.h"

/*
 * queue_runs(entries, count_max, bytes_max, max_physical_end, codes=None) -> (runs, scanned,
 * count, total, last, held_back_end): queue_reader._read_runs_in_c's walk of a queue's entries
 * (20 bytes each: physical offset i64, size i32, tags code i64, big-endian), with every message
 * that starts where the one before it ended joined to its run (queue_reader._read_one_by_one is
 * the Python read, compared with this one). ``runs`` is a list of (commit log offset, length);
 * max_physical_end < 0 means none. With ``codes`` (a tuple of tags codes: a TAG subscription's)
 * an entry whose tags code is none of them is scanned and passed over, as the Python read's
 * first stage does; the second stage, the exact tag, is ``runs_tags_in``'s. The size is read
 * unsigned, so that an entry of negative size is passed over as a blank one (a size of
 * 0x7FFFFFFF or more); an entry with a negative offset, or whose end overflows, raises
 * ValueError: a damaged entry is never sliced.
 */
static int append_run(PyObject *runs, long long start, long long end)
{
    PyObject *run = Py_BuildValue("(LL)", start, end - start);
    if (run == NULL)
        return -1;
    int r = PyList_Append(runs, run);
    Py_DECREF(run);
    return r;
}

/* A TAG subscription's tags codes (at most TAG_CODES_MAX: a longer list is refused). */
#define TAG_CODES_MAX 64

typedef struct {
    int64_t v[TAG_CODES_MAX];
    Py_ssize_t n;  /* -1: no filter */
} TagCodes;

static int tag_codes(PyObject *codes, TagCodes *out)
{
    out->n = -1;
    if (codes == Py_None)
        return 0;
    if (!PyTuple_Check(codes) || PyTuple_GET_SIZE(codes) > TAG_CODES_MAX) {
        PyErr_Format(PyExc_TypeError, "codes: a tuple of at most %d ints, or None",
                     TAG_CODES_MAX);
        return -1;
    }
    out->n = PyTuple_GET_SIZE(codes);
    for (Py_ssize_t i = 0; i < out->n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(codes, i));
        if (v == -1 && PyErr_Occurred())
            return -1;
        out->v[i] = v;
    }
    return 0;
}

static int tag_code_in(const TagCodes *codes, int64_t code)
{
    for (Py_ssize_t i = 0; i < codes->n; i++)
        if (codes->v[i] == code)
            return 1;
    return 0;
}

PyObject *py_queue_runs(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count_max;
    long long bytes_max, max_end;
    PyObject *codes_arg = Py_None;
    if (!PyArg_ParseTuple(args, "y*nLL|O", &buf, &count_max, &bytes_max, &max_end, &codes_arg))
        return NULL;
    PyObject *runs = NULL, *result = NULL;
    TagCodes codes;
    if (tag_codes(codes_arg, &codes) < 0)
        goto done;
    runs = PyList_New(0);
    if (runs == NULL)
        goto done;
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len / CQ_ENTRY_SIZE, scanned = 0, count = 0;
    long long total = 0, last = -1, held = -1, run_start = -1, run_end = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *e = p + i * CQ_ENTRY_SIZE;
        long long phy = get_i64(e + CQ_PHY_AT);
        uint32_t size = (uint32_t)get_i32(e + CQ_SIZE_AT);  /* a negative size reads as 2^31 or more */
        if (count && (count >= count_max || total + size > bytes_max))
            break;
        if (size >= CQ_BLANK_SIZE) {  /* blank, or damaged: passed over */
            scanned++;
            continue;
        }
        if (phy < 0) {
            PyErr_Format(PyExc_ValueError, "queue entry %zd: negative offset %lld", i, phy);
            goto done;
        }
        long long end;
        if (__builtin_add_overflow(phy, (long long)size, &end)) {
            PyErr_Format(PyExc_ValueError, "queue entry %zd: offset %lld + size %u overflows",
                         i, phy, size);
            goto done;
        }
        if (max_end >= 0 && end > max_end) {
            held = end;
            break;
        }
        scanned++;
        if (codes.n >= 0 && !tag_code_in(&codes, get_i64(e + CQ_TAGS_CODE_AT)))
            continue;
        if (phy == run_end) {
            run_end = end;
        } else {
            if (run_end >= 0 && append_run(runs, run_start, run_end) < 0)
                goto done;
            run_start = phy;
            run_end = end;
        }
        count++;
        total += size;
        last = phy;
    }
    if (run_end >= 0 && append_run(runs, run_start, run_end) < 0)
        goto done;
    result = Py_BuildValue("(OnnLLL)", runs, scanned, count, total, last, held);
done:
    Py_XDECREF(runs);
    PyBuffer_Release(&buf);
    return result;
}


/*
 * runs_tags_in(run, start, tags) -> bool: whether ``run`` (the commit log's bytes from offset
 * ``start``) is stored messages back to back, each well formed (read_stored: stored._layout's
 * checks), stored at its own offset (PHYSICALOFFSET) and with a TAGS property that is one of
 * ``tags`` (a tuple of UTF-8 bytes): a TAG subscription's exact check of what queue_runs let
 * through by tags code. False at the first that is not, and the caller reads message by message
 * (a tags code two tags share, a damaged message or queue entry).
 */
PyObject *py_runs_tags_in(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long start;
    PyObject *tags;
    if (!PyArg_ParseTuple(args, "y*LO!", &buf, &start, &PyTuple_Type, &tags))
        return NULL;
    const unsigned char *p = buf.buf;
    Py_ssize_t pos = 0, ntags = PyTuple_GET_SIZE(tags);
    int all = 1;
    for (Py_ssize_t i = 0; i < ntags; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(tags, i))) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "tags: a tuple of bytes");
            return NULL;
        }
    }
    while (all && pos < buf.len) {
        StoredRead r;
        memset(&r, 0, sizeof r);
        int got = read_stored(p + pos, buf.len - pos, &r);
        if (got < 0) {
            PyBuffer_Release(&buf);
            return NULL;
        }
        all = got == 1 && r.found.tags.p != NULL &&
              get_i64(p + pos + PHYSICALOFFSET_AT) == start + (long long)pos;
        if (all) {
            int found = 0;
            for (Py_ssize_t i = 0; i < ntags && !found; i++) {
                PyObject *tag = PyTuple_GET_ITEM(tags, i);
                found = PyBytes_GET_SIZE(tag) == r.found.tags.len &&
                        memcmp(PyBytes_AS_STRING(tag), r.found.tags.p, (size_t)r.found.tags.len) == 0;
            }
            all = found;
            pos += r.total;
        }
    }
    PyBuffer_Release(&buf);
    return PyBool_FromLong(all);
}
