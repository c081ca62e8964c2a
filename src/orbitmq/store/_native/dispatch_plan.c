/*
 * dispatch_plan.c: dispatch's per-message work in C (store/dispatch.py's).
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
 * The planned index entries go to index_put (index_file.c) in store_layout.h's planned form.
 */
#include "protocol/_native/java_hash.h"
#include "protocol/_native/stored_rules.h"
#include "protocol/_native/stored_twins.h"
#include "store/_native/entry_points.h"
#include "store/_native/store_layout.h"

#define SCHEDULE_TOPIC "SCHEDULE_TOPIC_XXXX"
#define TIMER_TOPIC "rmq_sys_wheel_timer"  /* store/dispatch.py's TIMER_TOPIC */

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
    put_i64(e + CQ_PHY_AT, phy);
    put_i32(e + CQ_SIZE_AT, size);
    put_i64(e + CQ_TAGS_CODE_AT, tags_code);
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
    for (Py_ssize_t at = from; at < ip->chunk.len; at += PLANNED_ENTRY_SIZE)  /* each hash once */
        if (get_i32(ip->chunk.p + at + PLANNED_HASH_AT) == hash)
            return 0;
    if (bytes_room(&ip->chunk, PLANNED_ENTRY_SIZE) < 0)
        return -1;
    unsigned char *e = ip->chunk.p + ip->chunk.len;
    put_i32(e + PLANNED_HASH_AT, hash);
    put_i64(e + PLANNED_PHY_AT, phy);
    put_i64(e + PLANNED_STORE_TS_AT, ts);
    ip->chunk.len += PLANNED_ENTRY_SIZE;
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
PyObject *py_dispatch_plan(PyObject *self, PyObject *args)
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
