/*
 * queue_runs.c: reading a queue: its entries as runs of the commit log (store/queue_reader.py).
 */
#include "protocol/_native/stored_rules.h"
#include "store/_native/entry_points.h"
#include "store/_native/store_layout.h"

/*
 * queue_runs(entries, count_max, bytes_max, max_physical_end) -> (runs, scanned, count, total,
 * last, held_back_end): the walk of queue_reader._walk_native, the unfiltered read of a queue's
 * entries (20 bytes each: physical offset i64, size i32, tags code i64, big-endian), with every
 * message that starts where the one before it ended joined to its run (queue_reader._walk_py
 * is the one-pass Python read, compared with this one). ``runs`` is a list of (commit log
 * offset, length); max_physical_end < 0 means none. The size is read unsigned, so that an entry
 * of negative size is passed over as a blank one (a size of 0x7FFFFFFF or more); an entry with
 * a negative offset, or whose end overflows, raises ValueError: a damaged entry is never sliced.
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

PyObject *py_queue_runs(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count_max;
    long long bytes_max, max_end;
    if (!PyArg_ParseTuple(args, "y*nLL", &buf, &count_max, &bytes_max, &max_end))
        return NULL;
    PyObject *runs = PyList_New(0), *result = NULL;
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

