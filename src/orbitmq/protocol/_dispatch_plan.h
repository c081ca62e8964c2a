/*
 * _dispatch_plan.h: dispatch's per-message work in C, for _speedups.c (its only includer).
 *
 * dispatch_plan() reads a range of the commit log as scan_stored() does (the same checks:
 * read_stored) and gives store/dispatch.py, per round, what it would have computed message by
 * message: each queue's new consume queue entries as one contiguous run of 20-byte entries
 * (ConsumeQueue.put_run writes a run with one copy), the arrivals of each run, and the index
 * entries (key hash, physical offset, store time) of every message in commit log order, hashed
 * as IndexService.build_index hashes (UNIQ_KEY, then each KEYS word, each hash once). What it
 * leaves to Python: the queue entries of a delay level and of a timer message (their tags code is
 * a delivery time, which Python reads) and the
 * keys of a message whose KEYS are not ASCII (Python's split knows Unicode's spaces).
 *
 * index_put() is IndexFile.put_hash over many entries: the same writes in the same order
 * (entry, header, slot), stopping where Python must act (a page without blocks, a full file).
 */
#ifndef ORBITMQ_DISPATCH_PLAN_H
#define ORBITMQ_DISPATCH_PLAN_H

#define CQ_ENTRY_SIZE 20
#define SCHEDULE_TOPIC "SCHEDULE_TOPIC_XXXX"
#define TIMER_TOPIC "rmq_sys_wheel_timer"  /* store/dispatch.py's TIMER_TOPIC */
#define INDEX_HEADER_SIZE 40
#define INDEX_RECORD 20  /* the planned form: hash i32, phy i64, store time i64 */

/* Java's String.hashCode continued over the UTF-16 units of valid UTF-8. */
static uint32_t java_hash_utf8(uint32_t h, const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t c = s[i];
        if (c < 0x80) {
            i += 1;
        } else if (c < 0xE0) {
            c = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            c = ((c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            i += 3;
        } else {
            c = ((c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            i += 4;
        }
        if (c < 0x10000) {
            h = h * 31u + c;
        } else {
            c -= 0x10000;
            h = h * 31u + (0xD800 + (c >> 10));
            h = h * 31u + (0xDC00 + (c & 0x3FF));
        }
    }
    return h;
}

/* index_file.topic_key_hash: abs(hashCode(topic + "#" + key)), 0 for Integer.MIN_VALUE. */
static int32_t topic_key_hash_utf8(Span topic, const unsigned char *key, Py_ssize_t key_len)
{
    uint32_t h = java_hash_utf8(0, topic.p, topic.len) * 31u + (uint32_t)'#';
    int32_t v = (int32_t)java_hash_utf8(h, key, key_len);
    return v == INT32_MIN ? 0 : (v < 0 ? -v : v);
}

static int is_py_space(unsigned char c)  /* str.split()'s ASCII whitespace */
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
}

/* -- growable byte buffers ------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
} Bytes;

static int bytes_room(Bytes *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    unsigned char *grown = PyMem_Realloc(b->p, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = grown;
    b->cap = cap;
    return 0;
}

/* -- the runs: one per queue (a new one where its queue offsets do not follow) ---------------- */

typedef struct {
    Span topic;
    int32_t queue_id;
    int64_t first, next;  /* queue offsets: the run's first, and one past its last */
    Bytes entries;
    int64_t *arrivals;    /* pairs: tags code, next offset (distinct tags codes) */
    Py_ssize_t arrival_len, arrival_cap;
} Run;

typedef struct {
    Run *runs;
    Py_ssize_t len, cap;
    Py_ssize_t *slots;  /* index + 1 of the newest run of a queue, 0 free */
    size_t mask;
} Runs;

static uint32_t run_hash(Span topic, int32_t queue_id)
{
    return name_hash(topic.p, topic.len) * 31u + (uint32_t)queue_id;
}

static int runs_rehash(Runs *rs, size_t cap)
{
    Py_ssize_t *slots = PyMem_Calloc(cap, sizeof(Py_ssize_t));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < rs->len; i++) {  /* the newest run of each queue wins */
        size_t s = run_hash(rs->runs[i].topic, rs->runs[i].queue_id) & (cap - 1);
        while (slots[s] != 0) {
            Run *o = &rs->runs[slots[s] - 1];
            if (o->queue_id == rs->runs[i].queue_id && o->topic.len == rs->runs[i].topic.len &&
                memcmp(o->topic.p, rs->runs[i].topic.p, (size_t)o->topic.len) == 0)
                break;
            s = (s + 1) & (cap - 1);
        }
        slots[s] = i + 1;
    }
    PyMem_Free(rs->slots);
    rs->slots = slots;
    rs->mask = cap - 1;
    return 0;
}

/* The run a message of (topic, queue) at ``qoff`` continues, or a new one; NULL on no memory. */
static Run *run_for(Runs *rs, Span topic, int32_t queue_id, int64_t qoff)
{
    if (rs->slots == NULL || (size_t)(2 * rs->len + 2) > rs->mask + 1) {
        if (runs_rehash(rs, rs->slots == NULL ? 64 : 2 * (rs->mask + 1)) < 0)
            return NULL;
    }
    size_t s = run_hash(topic, queue_id) & rs->mask;
    while (rs->slots[s] != 0) {
        Run *r = &rs->runs[rs->slots[s] - 1];
        if (r->queue_id == queue_id && r->topic.len == topic.len &&
            memcmp(r->topic.p, topic.p, (size_t)topic.len) == 0) {
            if (r->next == qoff)
                return r;
            break;  /* its offsets do not follow: a new run takes the slot */
        }
        s = (s + 1) & rs->mask;
    }
    if (rs->len == rs->cap) {
        Py_ssize_t cap = rs->cap ? 2 * rs->cap : 16;
        Run *grown = PyMem_Realloc(rs->runs, sizeof(Run) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        rs->runs = grown;
        rs->cap = cap;
    }
    Run *r = &rs->runs[rs->len++];
    memset(r, 0, sizeof *r);
    r->topic = topic;
    r->queue_id = queue_id;
    r->first = r->next = qoff;
    rs->slots[s] = rs->len;
    return r;
}

static int run_add(Run *r, int64_t phy, int32_t size, int64_t tags_code)
{
    if (bytes_room(&r->entries, CQ_ENTRY_SIZE) < 0)
        return -1;
    unsigned char *e = r->entries.p + r->entries.len;
    put_i64(e, phy);
    put_i32(e + 8, size);
    put_i64(e + 12, tags_code);
    r->entries.len += CQ_ENTRY_SIZE;
    r->next++;
    for (Py_ssize_t i = 0; i < r->arrival_len; i += 2)
        if (r->arrivals[i] == tags_code) {
            r->arrivals[i + 1] = r->next;
            return 0;
        }
    if (r->arrival_len + 2 > r->arrival_cap) {
        Py_ssize_t cap = r->arrival_cap ? 2 * r->arrival_cap : 8;
        int64_t *grown = PyMem_Realloc(r->arrivals, sizeof(int64_t) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->arrivals = grown;
        r->arrival_cap = cap;
    }
    r->arrivals[r->arrival_len++] = tags_code;
    r->arrivals[r->arrival_len++] = r->next;
    return 0;
}

static void runs_free(Runs *rs)
{
    for (Py_ssize_t i = 0; i < rs->len; i++) {
        PyMem_Free(rs->runs[i].entries.p);
        PyMem_Free(rs->runs[i].arrivals);
    }
    PyMem_Free(rs->runs);
    PyMem_Free(rs->slots);
}

static PyObject *runs_list(const Runs *rs)
{
    PyObject *list = PyList_New(rs->len);
    for (Py_ssize_t i = 0; list != NULL && i < rs->len; i++) {
        const Run *r = &rs->runs[i];
        PyObject *arrivals = PyTuple_New(r->arrival_len);
        for (Py_ssize_t k = 0; arrivals != NULL && k < r->arrival_len; k++) {
            PyObject *v = PyLong_FromLongLong(r->arrivals[k]);
            if (v == NULL)
                Py_CLEAR(arrivals);
            else
                PyTuple_SET_ITEM(arrivals, k, v);
        }
        PyObject *item = arrivals == NULL ? NULL
            : Py_BuildValue("(y#iLy#N)", (const char *)r->topic.p, r->topic.len, (int)r->queue_id,
                            (long long)r->first, (const char *)r->entries.p, r->entries.len,
                            arrivals);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* -- the index entries, in commit log order --------------------------------------------------- */

typedef struct {
    PyObject *items;  /* list: bytes of planned entries, or (topic, keys, uniq, phy, ts) tuples */
    Bytes chunk;
} IndexPlan;

static int index_flush_chunk(IndexPlan *ip)
{
    if (ip->chunk.len == 0)
        return 0;
    PyObject *b = PyBytes_FromStringAndSize((const char *)ip->chunk.p, ip->chunk.len);
    int failed = b == NULL || PyList_Append(ip->items, b) < 0;
    Py_XDECREF(b);
    ip->chunk.len = 0;
    return failed ? -1 : 0;
}

static int index_add(IndexPlan *ip, int32_t hash, int64_t phy, int64_t ts, Py_ssize_t from)
{
    for (Py_ssize_t at = from; at < ip->chunk.len; at += INDEX_RECORD)  /* each hash once */
        if (get_i32(ip->chunk.p + at) == hash)
            return 0;
    if (bytes_room(&ip->chunk, INDEX_RECORD) < 0)
        return -1;
    unsigned char *e = ip->chunk.p + ip->chunk.len;
    put_i32(e, hash);
    put_i64(e + 4, phy);
    put_i64(e + 12, ts);
    ip->chunk.len += INDEX_RECORD;
    return 0;
}

/* IndexService.build_index's hashes of one message: UNIQ_KEY, then each word of KEYS. */
static int index_message(IndexPlan *ip, Span topic, const PropsFound *f, int64_t phy, int64_t ts)
{
    Span keys = f->keys, uniq = f->uniq;
    if ((keys.p == NULL || keys.len == 0) && (uniq.p == NULL || uniq.len == 0))
        return 0;
    for (Py_ssize_t i = 0; keys.p != NULL && i < keys.len; i++)
        if (keys.p[i] >= 0x80) {  /* Unicode spaces split words too: Python's split decides */
            if (index_flush_chunk(ip) < 0)
                return -1;
            PyObject *t = Py_BuildValue("(y#y#y#LL)", (const char *)topic.p, topic.len,
                                        (const char *)keys.p, keys.len,
                                        (const char *)(uniq.p ? uniq.p : (const unsigned char *)""),
                                        uniq.p ? uniq.len : 0, (long long)phy, (long long)ts);
            int failed = t == NULL || PyList_Append(ip->items, t) < 0;
            Py_XDECREF(t);
            return failed ? -1 : 0;
        }
    Py_ssize_t from = ip->chunk.len;
    if (uniq.p != NULL && uniq.len > 0 &&
        index_add(ip, topic_key_hash_utf8(topic, uniq.p, uniq.len), phy, ts, from) < 0)
        return -1;
    Py_ssize_t i = 0;
    while (keys.p != NULL && i < keys.len) {
        while (i < keys.len && is_py_space(keys.p[i]))
            i++;
        Py_ssize_t start = i;
        while (i < keys.len && !is_py_space(keys.p[i]))
            i++;
        if (i > start &&
            index_add(ip, topic_key_hash_utf8(topic, keys.p + start, i - start), phy, ts, from) < 0)
            return -1;
    }
    return 0;
}

/* -- dispatch_plan ----------------------------------------------------------------------------- */

static int topic_is(Span topic, const char *name)
{
    return topic.len == (Py_ssize_t)strlen(name) && memcmp(topic.p, name, (size_t)topic.len) == 0;
}

/* A topic whose queue entries carry a delivery time as their tags code (Python computes it). */
static int is_delivery_time_topic(Span topic)
{
    return topic_is(topic, SCHEDULE_TOPIC) || topic_is(topic, TIMER_TOPIC);
}

/*
 * dispatch_plan(buf, pos, limit, count_max, base, want_index)
 *     -> (pos reached, count, stop, runs, delayed, index)
 * runs: [(topic bytes, queue id, first queue offset, entries bytes, (tags, next offset, ...))];
 * delayed: scan records (see scan_stored) of a delay level's and a timer's messages; index:
 * planned entries (bytes of hash i32, phy i64, store time i64) and (topic, keys, uniq, phy, ts)
 * tuples, in order.
 */
static PyObject *py_dispatch_plan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, limit, count_max;
    long long base;
    int want_index;
    if (!PyArg_ParseTuple(args, "y*nnnLp", &buf, &pos, &limit, &count_max, &base, &want_index))
        return NULL;
    PyObject *result = NULL, *delayed = PyList_New(0), *runs = NULL;
    IndexPlan ip = {PyList_New(0), {NULL, 0, 0}};
    Runs rs;
    memset(&rs, 0, sizeof rs);
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "dispatch_plan: negative position");
        goto done;
    }
    if (delayed == NULL || ip.items == NULL)
        goto done;
    const unsigned char *p = buf.buf;
    if (limit > buf.len)
        limit = buf.len;
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
            goto done;
        if (ok == 0) {
            stop = SCAN_BAD;
            break;
        }
        count++;
        if (takes_queue_entry(r.sys_flag)) {
            Span topic = {r.topic, r.topic_len};
            int64_t qoff = get_i64(m + QUEUEOFFSET_AT), phy = base + pos;
            int64_t ts = get_i64(m + store_ts_at(r.sys_flag));
            int32_t qid = get_i32(m + QUEUEID_AT);
            if (is_delivery_time_topic(topic)) {
                PyObject *rec = scan_record(m, pos, &r);
                int failed = rec == NULL || PyList_Append(delayed, rec) < 0;
                Py_XDECREF(rec);
                if (failed)
                    goto done;
            } else {
                int64_t tags = r.found.tags.p == NULL ? 0
                    : (int32_t)java_hash_utf8(0, r.found.tags.p, r.found.tags.len);
                Run *run = run_for(&rs, topic, qid, qoff);
                if (run == NULL || run_add(run, phy, (int32_t)r.total, tags) < 0)
                    goto done;
            }
            if (want_index && index_message(&ip, topic, &r.found, phy, ts) < 0)
                goto done;
        }
        pos += r.total;
    }
    if (index_flush_chunk(&ip) < 0 || (runs = runs_list(&rs)) == NULL)
        goto done;
    result = Py_BuildValue("(nniOOO)", pos, count, stop, runs, delayed, ip.items);
done:
    Py_XDECREF(runs);
    Py_XDECREF(delayed);
    Py_XDECREF(ip.items);
    PyMem_Free(ip.chunk.p);
    runs_free(&rs);
    PyBuffer_Release(&buf);
    return result;
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
static PyObject *py_index_put(PyObject *self, PyObject *args)
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
    Py_ssize_t need_at = 0, i = start, count = planned.len / INDEX_RECORD;
    if (slots < 1 || page < 1 || entries_at != INDEX_HEADER_SIZE + slots * 4 || start < 0 ||
        mm.len < entries_at + index_num * INDEX_RECORD || pages.len * page < entries_at) {
        PyErr_SetString(PyExc_ValueError, "index_put: geometry does not match the buffers");
        goto error;
    }
    for (; i < count; i++) {
        const unsigned char *e = (const unsigned char *)planned.buf + i * INDEX_RECORD;
        int32_t hash = get_i32(e);
        int64_t phy = get_i64(e + 4), ts = get_i64(e + 12);
        Py_ssize_t slot_at = INDEX_HEADER_SIZE + (Py_ssize_t)(hash % slots) * 4;
        Py_ssize_t entry_at = entries_at + (Py_ssize_t)n * INDEX_RECORD;
        if (n >= index_num) {
            need = PUT_FULL;
            break;
        }
        if (hash < 0 || (n > 1 && phy < end_phy)) {
            need = PUT_PYTHON;
            break;
        }
        if (entry_at + INDEX_RECORD > allocated_to) {
            need = PUT_ENTRIES;
            need_at = entry_at + INDEX_RECORD;
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
        long long diff = (ts - begin_ts) / 1000;
        if (ts - begin_ts < 0)
            diff = 0;
        if (diff > INT32_MAX)
            diff = INT32_MAX;
        put_i32(b + entry_at, hash);
        put_i64(b + entry_at + 4, phy);
        put_i32(b + entry_at + 12, (int32_t)diff);
        put_i32(b + entry_at + 16, (int32_t)head);
        n++;
        end_phy = phy;
        if (ts > end_ts)
            end_ts = ts;
        if (head == 0)
            slot_count++;
        put_i64(b, begin_ts);  /* the header, then the slot: see index_file.py on torn puts */
        put_i64(b + 8, end_ts);
        put_i64(b + 16, begin_phy);
        put_i64(b + 24, end_phy);
        put_i32(b + 32, (int32_t)slot_count);
        put_i32(b + 36, (int32_t)n);
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


/* -- reading a queue: its entries as runs of the commit log (store/queue_reader.py) --------- */

#define CQ_BLANK_SIZE 0x7FFFFFFF  /* consume_queue.BLANK_ENTRY_SIZE_FIELD */

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

static PyObject *py_queue_runs(PyObject *self, PyObject *args)
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
        long long phy = get_i64(e);
        uint32_t size = (uint32_t)get_i32(e + 8);  /* a negative size reads as 2^31 or more */
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

#endif
