/*
 * index_file.c: store/index_file.py's work in C: IndexFile.put_hash over many planned entries
 * (index_put: the same writes in the same order, entry, header, slot, stopping where Python
 * must act: a page without blocks, a full file) and the index's key hash (index_key_hash, the
 * twin of index_file.topic_key_hash). The file's layout is store_layout.h's.
 */
#include "protocol/_native/java_hash.h"
#include "protocol/_native/stored_rules.h"
#include "store/_native/entry_points.h"
#include "store/_native/store_layout.h"

/* abs(hashCode("topic#key")), 0 for Integer.MIN_VALUE: the IndexFile's key hash */
PyObject *py_index_key_hash(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
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

/* -- index_put: IndexFile.put_hash over planned entries ---------------------------------------- */

enum { PUT_DONE = 0, PUT_FULL, PUT_PAGE, PUT_ENTRIES, PUT_PYTHON };

/*
 * index_put(mm, entries_at, hash_slot_num, index_num, state, pages, entries_allocated_to, page,
 *           planned, start) -> (next, state, need, need_at)
 * state: (index count, begin ts, end ts, begin phy, end phy, slot count). Stops with need
 * PUT_FULL (the file is full), PUT_PAGE (the slot table page holding byte need_at has no blocks
 * yet: IndexFile._ensure_page), PUT_ENTRIES (the entry log below need_at has none:
 * _ensure_entries), PUT_PYTHON (an offset going back: put_hash asserts), or PUT_DONE.
 */
PyObject *py_index_put(PyObject *self, PyObject *args)
{
    Py_buffer mm, pages, planned;
    Py_ssize_t entries_at, slots, index_num, allocated_to, page, start;
    long long n, begin_ts, end_ts, begin_phy, end_phy, slot_count;
    if (!PyArg_ParseTuple(args, "w*nnn(LLLLLL)y*nny*n", &mm, &entries_at, &slots, &index_num, &n,
                          &begin_ts, &end_ts, &begin_phy, &end_phy, &slot_count, &pages,
                          &allocated_to, &page, &planned, &start))
        return NULL;
    unsigned char *b = mm.buf;
    const unsigned char *pg = pages.buf;
    int need = PUT_DONE;
    Py_ssize_t need_at = 0, i = start, count = planned.len / PLANNED_ENTRY_SIZE;
    if (slots < 1 || page < 1 || entries_at != INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE ||
        start < 0 || mm.len < entries_at + index_num * INDEX_ENTRY_SIZE || pages.len * page < entries_at) {
        PyErr_SetString(PyExc_ValueError, "index_put: geometry does not match the buffers");
        goto error;
    }
    for (; i < count; i++) {
        const unsigned char *e = (const unsigned char *)planned.buf + i * PLANNED_ENTRY_SIZE;
        int32_t hash = get_i32(e + PLANNED_HASH_AT);
        int64_t phy = get_i64(e + PLANNED_PHY_AT), ts = get_i64(e + PLANNED_STORE_TS_AT);
        Py_ssize_t slot_at = INDEX_HEADER_SIZE + (Py_ssize_t)(hash % slots) * INDEX_SLOT_SIZE;
        Py_ssize_t entry_at = entries_at + (Py_ssize_t)n * INDEX_ENTRY_SIZE;
        if (n >= index_num) {
            need = PUT_FULL;
            break;
        }
        if (hash < 0 || (n > 1 && phy < end_phy)) {
            need = PUT_PYTHON;
            break;
        }
        if (entry_at + INDEX_ENTRY_SIZE > allocated_to) {
            need = PUT_ENTRIES;
            need_at = entry_at + INDEX_ENTRY_SIZE;
            break;
        }
        if (!pg[0] || !pg[slot_at / page]) {
            need = PUT_PAGE;
            need_at = pg[0] ? slot_at : 0;
            break;
        }
        int64_t head = get_i32(b + slot_at);
        if (!(0 < head && head < n))
            head = 0;
        if (n == 1) {
            begin_ts = ts;
            begin_phy = phy;
        }
        /* Seconds since the begin timestamp clamped into 0..INT32_MAX, as put_hash clamps them;
         * a difference past int64 (a damaged header or store time) is clamped the same way. */
        long long diff;
        if (__builtin_sub_overflow((long long)ts, begin_ts, &diff))
            diff = ts > begin_ts ? INT32_MAX : 0;
        else
            diff = diff < 0 ? 0 : diff / 1000;
        if (diff > INT32_MAX)
            diff = INT32_MAX;
        put_i32(b + entry_at + INDEX_ENTRY_HASH_AT, hash);
        put_i64(b + entry_at + INDEX_ENTRY_PHY_AT, phy);
        put_i32(b + entry_at + INDEX_ENTRY_TIME_DIFF_AT, (int32_t)diff);
        put_i32(b + entry_at + INDEX_ENTRY_PREV_AT, (int32_t)head);
        n++;
        end_phy = phy;
        if (ts > end_ts)
            end_ts = ts;
        if (head == 0)
            slot_count++;
        put_i64(b + INDEX_BEGIN_TS_AT, begin_ts);  /* the header, then the slot: see index_file.py */
        put_i64(b + INDEX_END_TS_AT, end_ts);
        put_i64(b + INDEX_BEGIN_PHY_AT, begin_phy);
        put_i64(b + INDEX_END_PHY_AT, end_phy);
        put_i32(b + INDEX_SLOT_COUNT_AT, (int32_t)slot_count);
        put_i32(b + INDEX_COUNT_AT, (int32_t)n);
        put_i32(b + slot_at, (int32_t)(n - 1));
    }
    PyBuffer_Release(&mm);
    PyBuffer_Release(&pages);
    PyBuffer_Release(&planned);
    return Py_BuildValue("(n(LLLLLL)in)", i, n, begin_ts, end_ts, begin_phy, end_phy, slot_count,
                         need, need_at);
error:
    PyBuffer_Release(&mm);
    PyBuffer_Release(&pages);
    PyBuffer_Release(&planned);
    return NULL;
}

