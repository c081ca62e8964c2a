/*
 * fastpath.c: FastPath, the native fast path of plain sends (see fastpath.h): the topic snapshot,
 * the send header's values, one take() over a connection's bytes, the type.
 */
#include <stdio.h>

#include "broker/_native/fastpath.h"
#include "broker/_native/fastpath_answer.h"
#include "broker/_native/pull_request.h"
#include "protocol/_native/stored_encode.h"

static void clear_topics(FastPathObject *fp)
{
    for (Py_ssize_t i = 0; i < fp->topic_count; i++)
        Py_XDECREF(fp->topics[i].name);
    PyMem_Free(fp->topics);
    PyMem_Free(fp->slots);
    fp->topics = NULL;
    fp->slots = NULL;
    fp->topic_count = 0;
    fp->topic_cap = 0;
}

/* Whether ``key`` (a str) may name a topic of the snapshot: its UTF-8 in ``*utf8``/``*len``. */
static int topic_key(PyObject *key, const char **utf8, Py_ssize_t *len)
{
    *utf8 = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, len) : NULL;
    if (*utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    return *len >= 1 && *len <= TOPIC_SIZE_MAX && topic_ok((const unsigned char *)*utf8, *len);
}

static void fill_entry(TopicEntry *e, PyObject *key, const char *utf8, Py_ssize_t len, long nums)
{
    e->name = Py_NewRef(key);
    e->part[0] = (unsigned char)len;
    memcpy(e->part + 1, utf8, (size_t)len);
    e->part_len = len + 1;
    e->write_queue_nums = (int32_t)nums;
}

static size_t entry_home(const TopicEntry *e, size_t mask)
{
    return name_hash(e->part + 1, e->part_len - 1) & mask;
}

/* The slot holding the topic, or -1. */
static Py_ssize_t slot_of(const FastPathObject *fp, const unsigned char *t, Py_ssize_t n)
{
    if (fp->slots == NULL)
        return -1;
    size_t i = name_hash(t, n) & fp->mask;
    while (fp->slots[i] != 0) {
        const TopicEntry *e = &fp->topics[fp->slots[i] - 1];
        if (e->part_len - 1 == n && memcmp(e->part + 1, t, (size_t)n) == 0)
            return (Py_ssize_t)i;
        i = (i + 1) & fp->mask;
    }
    return -1;
}

static const TopicEntry *find_topic(const FastPathObject *fp, const unsigned char *t, Py_ssize_t n)
{
    Py_ssize_t at = slot_of(fp, t, n);
    return at < 0 ? NULL : &fp->topics[fp->slots[at] - 1];
}

/* Slots for ``cap`` (a power of two) rebuilt from the entries; -1 without memory. */
static int rehash_slots(FastPathObject *fp, size_t cap)
{
    Py_ssize_t *slots = PyMem_Calloc(cap, sizeof(Py_ssize_t));
    if (slots == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < fp->topic_count; k++) {
        size_t s = entry_home(&fp->topics[k], cap - 1);
        while (slots[s] != 0)
            s = (s + 1) & (cap - 1);
        slots[s] = k + 1;
    }
    PyMem_Free(fp->slots);
    fp->slots = slots;
    fp->mask = cap - 1;
    return 0;
}

/* Empties slot ``i`` of linear probing: the entries after it that would no longer be found from
 * their home slot move back (no tombstones, so lookups never slow down with deletes). */
static void free_slot(FastPathObject *fp, size_t i)
{
    size_t j = i;
    fp->slots[i] = 0;
    for (;;) {
        j = (j + 1) & fp->mask;
        if (fp->slots[j] == 0)
            return;
        size_t home = entry_home(&fp->topics[fp->slots[j] - 1], fp->mask);
        /* the entry at j stays when its home lies cyclically in (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            fp->slots[i] = fp->slots[j];
            fp->slots[j] = 0;
            i = j;
        }
    }
}

/* put_topic(topic, write_queue_nums): one topic of the snapshot added, changed or (with 0, or a
 * name or count set_topics would leave out) removed, at a cost that does not grow with the
 * table: the broker calls it for each topic change instead of taking a new snapshot. */
static PyObject *fp_put_topic(FastPathObject *fp, PyObject *args)
{
    PyObject *key;
    long nums;
    if (!PyArg_ParseTuple(args, "Ul", &key, &nums))
        return NULL;
    const char *utf8;
    Py_ssize_t len;
    int ok = topic_key(key, &utf8, &len);
    if (!ok) {  /* never in the snapshot, so nothing to remove either */
        Py_RETURN_FALSE;
    }
    Py_ssize_t at = slot_of(fp, (const unsigned char *)utf8, len);
    if (nums < 1 || nums > INT32_MAX) {
        if (at >= 0) {
            Py_ssize_t idx = fp->slots[at] - 1, last = fp->topic_count - 1;
            free_slot(fp, (size_t)at);
            Py_DECREF(fp->topics[idx].name);
            if (idx != last) {  /* the last entry fills the hole; its slot follows it */
                Py_ssize_t moved = slot_of(fp, fp->topics[last].part + 1,
                                           fp->topics[last].part_len - 1);
                assert(moved >= 0);
                fp->topics[idx] = fp->topics[last];
                fp->slots[moved] = idx + 1;
            }
            fp->topic_count = last;
        }
        Py_RETURN_FALSE;
    }
    if (at >= 0) {
        fp->topics[fp->slots[at] - 1].write_queue_nums = (int32_t)nums;
        Py_RETURN_TRUE;
    }
    if (fp->topic_count == fp->topic_cap) {
        Py_ssize_t cap = fp->topic_cap < 8 ? 8 : 2 * fp->topic_cap;
        TopicEntry *grown = PyMem_Realloc(fp->topics, (size_t)cap * sizeof(TopicEntry));
        if (grown == NULL)
            return PyErr_NoMemory();
        fp->topics = grown;
        fp->topic_cap = cap;
    }
    size_t slot_cap = fp->slots == NULL ? 0 : fp->mask + 1;
    if (slot_cap < (size_t)(2 * (fp->topic_count + 1) + 2)) {
        size_t cap = slot_cap < 16 ? 16 : slot_cap;
        while (cap < (size_t)(2 * (fp->topic_count + 1) + 2))
            cap <<= 1;
        if (rehash_slots(fp, cap) < 0)
            return PyErr_NoMemory();
    }
    TopicEntry *e = &fp->topics[fp->topic_count];
    fill_entry(e, key, utf8, len, nums);
    size_t s = entry_home(e, fp->mask);
    while (fp->slots[s] != 0)
        s = (s + 1) & fp->mask;
    fp->slots[s] = ++fp->topic_count;
    Py_RETURN_TRUE;
}

/* set_topics({topic: write_queue_nums}): the topics the fast path may store to, replacing the
 * last snapshot. Topics that cannot be stored as they are named (stored._layout's topic rule)
 * are left out, and so are queue counts outside 1..2**31-1. */
static PyObject *fp_set_topics(FastPathObject *fp, PyObject *table)
{
    if (!PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "set_topics takes a dict of topic -> write queue nums");
        return NULL;
    }
    Py_ssize_t n = PyDict_GET_SIZE(table), cap = 16, i = 0, count = 0;
    while (cap < 2 * n + 2)
        cap <<= 1;
    TopicEntry *topics = PyMem_Calloc((size_t)(n ? n : 1), sizeof(TopicEntry));
    Py_ssize_t *slots = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
    if (topics == NULL || slots == NULL) {
        PyMem_Free(topics);
        PyMem_Free(slots);
        return PyErr_NoMemory();
    }
    PyObject *key, *value;
    while (PyDict_Next(table, &i, &key, &value)) {
        Py_ssize_t len;
        const char *utf8;
        long nums = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
        if (nums == -1)
            PyErr_Clear();
        if (nums < 1 || nums > INT32_MAX || !topic_key(key, &utf8, &len))
            continue;
        TopicEntry *e = &topics[count];
        fill_entry(e, key, utf8, len, nums);
        size_t s = entry_home(e, (size_t)(cap - 1));
        while (slots[s] != 0)
            s = (s + 1) & (size_t)(cap - 1);
        slots[s] = ++count;
    }
    clear_topics(fp);
    fp->topics = topics;
    fp->slots = slots;
    fp->mask = (size_t)(cap - 1);
    fp->topic_count = count;
    fp->topic_cap = n ? n : 1;
    return PyLong_FromSsize_t(count);
}

/* -- the send header's values (_fast_headers.send_v2_fast: a strict subset of what it takes) -- */

/* An optional flag: absent, empty, "false" or "0" is 0; "true" or "1" is 1; -1 otherwise. */
static int span_bool(Span s)
{
    if (s.p == NULL || s.len == 0 || (s.len == 5 && memcmp(s.p, "false", 5) == 0) ||
        (s.len == 1 && s.p[0] == '0'))
        return 0;
    if ((s.len == 4 && memcmp(s.p, "true", 4) == 0) || (s.len == 1 && s.p[0] == '1'))
        return 1;
    return -1;
}

/* Whether every property name of well-formed properties is one the broker called inert. */
static int props_inert(const void *arg, const unsigned char *p, Py_ssize_t n)
{
    const FastPathObject *fp = arg;
    Py_ssize_t i = 0;
    while (i < n) {
        const unsigned char *item = p + i;
        const unsigned char *stop = memchr(item, 0x02, (size_t)(n - i));
        Py_ssize_t item_len = stop != NULL ? stop - item : n - i;
        const unsigned char *sep = memchr(item, 0x01, (size_t)item_len);
        Py_ssize_t name_len = sep != NULL ? sep - item : item_len;
        int known = 0;
        for (int k = 0; k < fp->inert_count && !known; k++)
            known = fp->inert[k].len == name_len &&
                    memcmp(fp->inert[k].p, item, (size_t)name_len) == 0;
        if (!known)
            return 0;
        i += item_len + 1;
    }
    return 1;
}

int out_reserve(Take *t, Py_ssize_t more)
{
    if (t->out_len + more <= t->out_cap)
        return 0;
    Py_ssize_t cap = t->out_cap ? t->out_cap : 4096;
    while (cap < t->out_len + more)
        cap *= 2;
    char *grown = PyMem_Realloc(t->out, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->out = grown;
    t->out_cap = cap;
    return 0;
}

/* The call's counts of ``topic``, made room for first; NULL with an exception set. */
static TopicCount *reserve_count(Take *t, const TopicEntry *topic)
{
    for (Py_ssize_t i = 0; i < t->count_len; i++)
        if (t->counts[i].topic == topic)
            return &t->counts[i];
    if (t->count_len == t->count_cap) {
        Py_ssize_t cap = t->count_cap ? 2 * t->count_cap : 4;
        TopicCount *grown = PyMem_Realloc(t->counts, sizeof(TopicCount) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        t->counts = grown;
        t->count_cap = cap;
    }
    TopicCount *c = &t->counts[t->count_len++];
    memset(c, 0, sizeof *c);
    c->topic = topic;
    return c;
}

/* Counts a stored send (its counts were reserved: cannot fail), as BrokerStats.on_send does. */
static void count_send(const FastPathObject *fp, Take *t, const TopicEntry *topic, long long msgs,
                       long long size)
{
    TopicCount *c = NULL;
    for (Py_ssize_t i = 0; i < t->count_len && c == NULL; i++)
        if (t->counts[i].topic == topic)
            c = &t->counts[i];
    assert(c != NULL);
    long long per = msgs ? size / msgs : size;
    int b = 0;
    while (b < fp->bounds_count && fp->size_bounds[b] < per)  /* bisect_left */
        b++;
    c->times++;
    c->msgs += msgs;
    c->size += size;
    c->by_size[b] += msgs;
}


/* -- one send ---------------------------------------------------------------------------------- */

enum { SEND_HANDLED = 0, SEND_DECLINED, SEND_SEGMENT_FULL, SEND_ERROR };

typedef struct {
    const TopicEntry *topic;
    int32_t queue_id, flag, sys_flag, reconsume;
    int64_t born_ts;
    int batch, oneway;
    Span props;
} SendFields;

/* The send header's fields, or 0 to decline (the Python path decides). */
static int send_fields(const FastPathObject *fp, const WireRequest *r, SendFields *f)
{
    const Span *s = r->send;
    int64_t nums, qid, sys_flag, born, flag, reconsume, max_reconsume;
    if (r->code != CODE_SEND_MESSAGE && r->code != CODE_SEND_MESSAGE_V2 &&
        r->code != CODE_SEND_BATCH_MESSAGE)
        return 0;
    if ((r->flag & FLAG_RESPONSE) || r->has_v1_names || s[0].p == NULL || s[2].p == NULL)
        return 0;  /* a: producer group, c: default topic (unread for an existing topic) */
    if (!span_int(s[3], 0, INT32_MAX, &nums) || !span_int(s[4], INT32_MIN, INT32_MAX, &qid) ||
        !span_int(s[5], 0, USER_SYS_FLAGS, &sys_flag) || !span_int(s[6], 0, INT64_MAX, &born) ||
        !span_int(s[7], INT32_MIN, INT32_MAX, &flag) ||
        !span_opt_int(s[9], 0, 0, INT32_MAX, &reconsume) ||
        !span_opt_int(s[11], 0, -1, INT32_MAX, &max_reconsume))
        return 0;
    int unit_mode = span_bool(s[10]), batch = span_bool(s[12]);
    if (unit_mode < 0 || batch < 0 || s[1].p == NULL)
        return 0;
    f->topic = find_topic(fp, s[1].p, s[1].len);
    if (f->topic == NULL || qid < 0 || qid >= f->topic->write_queue_nums)
        return 0;  /* unknown (or not plain) topic; a queue the broker would pick itself */
    if (r->body_len > fp->max_message_size || s[8].len >= PROPERTIES_SIZE_MAX)
        return 0;
    f->queue_id = (int32_t)qid;
    f->flag = (int32_t)flag;
    f->sys_flag = (int32_t)sys_flag;
    f->reconsume = (int32_t)reconsume;
    f->born_ts = born;
    f->batch = r->code == CODE_SEND_BATCH_MESSAGE || batch;
    f->oneway = (r->flag & FLAG_ONEWAY) != 0;
    f->props = s[8];
    return 1;
}

static PyObject *queue_key(const SendFields *f)
{
    PyObject *qid = PyLong_FromLong(f->queue_id);
    if (qid == NULL)
        return NULL;
    PyObject *key = PyTuple_Pack(2, f->topic->name, qid);
    Py_DECREF(qid);
    return key;
}

/* The next queue offset of the send's queue; -2 for a queue not in the table (new, or not yet
 * loaded by the store: its first send takes the Python path, which asks the store); -1 with an
 * exception set. */
static int64_t queue_offset(Take *t, PyObject *key)
{
    PyObject *found = PyDict_GetItemWithError(t->queue_table, key);
    if (found == NULL)
        return PyErr_Occurred() ? -1 : -2;
    long long v = PyLong_AsLongLong(found);
    if (v < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "negative queue offset in the table");
    return v < 0 ? -1 : v;
}

/* Stores one send planned by send_fields, answers it and counts it. Everything that can fail
 * (memory) is done before the segment and the table change, but the table's update itself:
 * SEND_ERROR (an exception set) then means this send changed nothing published. */
static int store_send(FastPathObject *fp, Take *t, const WireRequest *r, const SendFields *f)
{
    StoreContext c = {f->topic->part, t->born, fp->store_host, f->topic->part_len, t->born_len,
                      fp->store_host_len, f->queue_id, f->sys_flag, f->reconsume, f->born_ts};
    if (context_check(&c) != CONTEXT_OK)
        return SEND_DECLINED;
    SinglePlan single;
    BatchPlan batch;
    Py_ssize_t size, count;
    if (f->batch) {
        batch_plan(r->body, r->body_len, &c, fp->max_message_size, fp->max_blob_size,
                   props_inert, fp, &batch);
        if (batch.status != BATCH_OK)
            return SEND_DECLINED;
        size = batch.out_size;
        count = batch.count;
    } else {
        single_plan(f->props.p, f->props.len, &single);
        if (single.status != SINGLE_OK || !props_inert(fp, f->props.p, f->props.len))
            return SEND_DECLINED;
        size = stored_size(&c, r->body_len, f->props.len + single.add_separator);
        count = 1;
    }
    if (t->seg_pos + size + BLANK_ENTRY_SIZE > t->seg_len)
        return SEND_SEGMENT_FULL;  /* the Python path rolls the segment (blank entry and all) */
    PyObject *key = queue_key(f), *next = NULL;
    int64_t first = key != NULL ? queue_offset(t, key) : -1;
    if (first == -2) {
        Py_DECREF(key);
        return SEND_DECLINED;
    }
    if (first >= 0)  /* every message of a plain send takes a queue offset */
        next = PyLong_FromLongLong(first + count);
    if (next == NULL || reserve_answer(t, count) < 0 || reserve_count(t, f->topic) == NULL) {
        Py_XDECREF(key);
        Py_XDECREF(next);
        return SEND_ERROR;
    }
    unsigned char *m = t->seg + t->seg_pos;
    int64_t phy = t->seg_base + t->seg_pos, qoff = first;
    if (f->batch && size >= fp->gil_release_bytes) {
        Py_BEGIN_ALLOW_THREADS
        batch_write(m, r->body, r->body_len, &c, NULL);
        Py_END_ALLOW_THREADS
    } else if (f->batch) {
        batch_write(m, r->body, r->body_len, &c, NULL);
    } else {
        write_stored(m, &c, f->flag, r->body, r->body_len, f->props.p, f->props.len,
                     single.add_separator);
    }
    for (Py_ssize_t i = 0, rel = 0; i < count; i++) {
        qoff = patch_one(m + rel, phy + rel, qoff, t->now);
        rel += get_i32(m + rel + TOTALSIZE_AT);
    }
    assert(qoff == first + count);
    int failed = PyDict_SetItem(t->queue_table, key, next) < 0;
    Py_DECREF(next);
    Py_DECREF(key);
    if (failed)
        return SEND_ERROR;  /* written past the published end only: nothing happened */
    t->seg_pos += size;
    if (!f->oneway)
        answer_send(fp, t, r, m, phy, count, f->queue_id, first);
    count_send(fp, t, f->topic, count, size);
    t->by_code[r->code == CODE_SEND_MESSAGE ? 0 : r->code == CODE_SEND_MESSAGE_V2 ? 1 : 2]++;
    return SEND_HANDLED;
}

/* -- take(): every frame it can handle, in order ---------------------------------------------- */

static int ensure_scratch(FastPathObject *fp, Py_ssize_t need)
{
    if (need <= fp->scratch_cap)
        return 0;
    unsigned char *grown = PyMem_Realloc(fp->scratch, (size_t)need);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    fp->scratch = grown;
    fp->scratch_cap = need;
    return 0;
}

/* The per-topic counts of a take() as [(topic, requests, messages, bytes, by_size), ...]. */
static PyObject *counts_list(const FastPathObject *fp, const Take *t)
{
    PyObject *list = PyList_New(t->count_len);
    for (Py_ssize_t i = 0; list != NULL && i < t->count_len; i++) {
        const TopicCount *c = &t->counts[i];
        PyObject *sizes = PyTuple_New(fp->bounds_count + 1);
        for (int b = 0; sizes != NULL && b <= fp->bounds_count; b++) {
            PyObject *v = PyLong_FromLongLong(c->by_size[b]);
            if (v == NULL)
                Py_CLEAR(sizes);
            else
                PyTuple_SET_ITEM(sizes, b, v);
        }
        PyObject *item = sizes == NULL ? NULL : Py_BuildValue("(OLLLN)", c->topic->name, c->times,
                                                              c->msgs, c->size, sizes);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* The end of a frame's turn: counts it, and whether take() goes on (0) or stops (its STOP_). */
static int after_send(FastPathObject *fp, int sent)
{
    if (sent == SEND_ERROR) {  /* out of memory: this frame is the Python path's */
        PyErr_Clear();
        fp->errors++;
        sent = SEND_DECLINED;
    }
    if (sent == SEND_HANDLED) {
        fp->handled++;
        return -1;
    }
    if (sent == SEND_SEGMENT_FULL) {
        fp->segment_full++;
        return STOP_SEGMENT_FULL;
    }
    fp->declined++;
    return STOP_DECLINED;
}

/* take()'s frames: each read, checked (and with authentication on, its signature and rules)
 * and stored in turn, up to the first declined. */
static int take_frames(FastPathObject *fp, Take *t, const Py_buffer *in, Py_ssize_t *pos)
{
    for (;;) {
        WireRequest r;
        Py_ssize_t frame_size = 0;
        int read = read_frame((const unsigned char *)in->buf + *pos, in->len - *pos,
                              fp->max_frame_size, fp->scratch, &r, &frame_size);
        if (read == FRAME_PARTIAL)
            return STOP_PARTIAL;
        SendFields f;
        int sent = read == FRAME_DECLINED || !send_fields(fp, &r, &f) ? SEND_DECLINED
                                                                       : SEND_HANDLED;
        if (sent == SEND_HANDLED && fp->auth.on) {
            int verdict = auth_verdict(&fp->auth, &r, r.send[1], t->session, t->now);
            if (verdict != AUTH_OK) {
                fp->auth.declined[verdict]++;
                sent = SEND_DECLINED;
            }
        }
        if (sent == SEND_HANDLED)
            sent = store_send(fp, t, &r, &f);
        int stop = after_send(fp, sent);
        if (stop >= 0)
            return stop;
        *pos += frame_size;
    }
}

/*
 * take(buf, pos, born_host, segment, seg_pos, seg_base, now, queue_table[, session])
 *     -> (pos, seg_pos, answers: bytes | None, stop, counts: list | None, by_code)
 * Frames from ``buf[pos:]``; messages into ``segment`` (the last commit log segment, writable,
 * its first byte at commit log offset ``seg_base``) from ``seg_pos``, with store time ``now``.
 * ``stop`` says why it stopped at ``pos``: STOP_PARTIAL (no whole frame left), STOP_DECLINED or
 * STOP_SEGMENT_FULL (the frame there is the Python path's). ``by_code``: the requests handled
 * per request code (10, 310, 320), for the request timings of the metrics. ``session``: the
 * connection's record under the stateful strategy (a bytearray of AUTH_SESSION_SIZE), or None.
 */
static PyObject *fp_take(FastPathObject *fp, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer in, born, seg;
    Py_ssize_t pos;
    long long seg_pos, seg_base, now;
    PyObject *session = nargs == 9 ? args[8] : Py_None;
    if ((nargs != 8 && nargs != 9) || !PyDict_Check(args[7]) ||
        (session != Py_None && !(PyByteArray_Check(session) &&
                                 PyByteArray_GET_SIZE(session) == AUTH_SESSION_SIZE))) {
        PyErr_SetString(PyExc_TypeError, "take(buf, pos, born_host, segment, seg_pos, seg_base, "
                                         "now, queue_table: dict[, session: bytearray | None])");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    seg_pos = PyLong_AsLongLong(args[4]);
    seg_base = PyLong_AsLongLong(args[5]);
    now = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &born, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    if (PyObject_GetBuffer(args[3], &seg, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&born);
        return NULL;
    }
    PyObject *result = NULL;
    Take t = {seg.buf, seg.len, (Py_ssize_t)seg_pos, seg_base, now, born.buf, born.len, args[7],
              NULL, 0, 0, NULL, 0, 0, {0, 0, 0},
              session != Py_None ? (unsigned char *)PyByteArray_AS_STRING(session) : NULL};
    int stop = STOP_PARTIAL;
    if (pos < 0 || pos > in.len || seg_pos < 0 || seg_pos > seg.len || seg_base < 0) {
        PyErr_SetString(PyExc_ValueError, "take: position outside its buffer");
        goto done;
    }
    if (ensure_scratch(fp, in.len - pos) < 0)
        goto done;
    fp->busy = 1;
    stop = take_frames(fp, &t, &in, &pos);
    fp->busy = 0;
    PyObject *answers = t.out_len ? PyBytes_FromStringAndSize(t.out, t.out_len) : Py_NewRef(Py_None);
    PyObject *counts = t.count_len ? counts_list(fp, &t) : Py_NewRef(Py_None);
    if (answers != NULL && counts != NULL)
        result = Py_BuildValue("(nnNiN(nnn))", pos, t.seg_pos, answers, stop, counts,
                               t.by_code[0], t.by_code[1], t.by_code[2]);
    else {
        Py_XDECREF(answers);
        Py_XDECREF(counts);
    }
done:
    PyMem_Free(t.out);
    PyMem_Free(t.counts);
    PyBuffer_Release(&in);
    PyBuffer_Release(&born);
    PyBuffer_Release(&seg);
    return result;
}

/* -- the type ---------------------------------------------------------------------------------- */

/* FastPath(store_host, max_message_size, max_blob_size, max_frame_size, inert_properties,
 *          size_bounds, gil_release_bytes[, auth])
 * ``auth``: None (the default: no authentication) or (authorization: bool, open_codes: tuple of
 * the send codes the authentication whitelist names[, stateful_ms: int, 0 for stateless]). With
 * it every signed send is declined until set_users gives the users; it cannot be turned off
 * later. */
static int fp_init(FastPathObject *fp, PyObject *args, PyObject *kwds)
{
    Py_buffer host;
    PyObject *inert, *bounds, *auth = Py_None;
    if (fp->topics != NULL || fp->auth.users != NULL || fp->inert_names != NULL) {
        PyErr_SetString(PyExc_TypeError, "FastPath: already initialized");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "y*nnnO!O!n|O", &host, &fp->max_message_size, &fp->max_blob_size,
                          &fp->max_frame_size, &PyTuple_Type, &inert, &PyTuple_Type, &bounds,
                          &fp->gil_release_bytes, &auth))
        return -1;
    if (auth != Py_None) {
        Py_ssize_t parts = PyTuple_Check(auth) ? PyTuple_GET_SIZE(auth) : 0;
        PyObject *codes = parts == 2 || parts == 3 ? PyTuple_GET_ITEM(auth, 1) : NULL;
        int authorization = codes != NULL ? PyObject_IsTrue(PyTuple_GET_ITEM(auth, 0)) : -1;
        long long stateful_ms = parts == 3 ? PyLong_AsLongLong(PyTuple_GET_ITEM(auth, 2)) : 0;
        if (stateful_ms < 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "FastPath: stateful_ms is 0 or more");
        if (authorization < 0 || !PyTuple_Check(codes) || PyErr_Occurred()) {
            PyBuffer_Release(&host);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "FastPath: auth is None or (authorization: bool, "
                                                 "open_codes: tuple[, stateful_ms: int])");
            return -1;
        }
        fp->auth.on = 1;
        fp->auth.authorization = authorization;
        fp->auth.stateful_ms = stateful_ms;
        fp->auth.open_codes = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(codes); i++) {
            long code = PyLong_Check(PyTuple_GET_ITEM(codes, i))
                      ? PyLong_AsLong(PyTuple_GET_ITEM(codes, i)) : -1;
            fp->auth.open_codes |= code == CODE_SEND_MESSAGE ? 1u : code == CODE_SEND_MESSAGE_V2 ? 2u
                                 : code == CODE_SEND_BATCH_MESSAGE ? 4u : 0u;
        }
        PyErr_Clear();
    }
    int ok = host.len == HOST_V4_SIZE || host.len == HOST_V6_SIZE;
    if (ok) {
        memcpy(fp->store_host, host.buf, (size_t)host.len);
        fp->store_host_len = host.len;
        for (Py_ssize_t i = 0; i < host.len; i++) {
            fp->id_prefix[2 * i] = HEX_UPPER[fp->store_host[i] >> 4];
            fp->id_prefix[2 * i + 1] = HEX_UPPER[fp->store_host[i] & 0xF];
        }
        fp->id_prefix_len = 2 * host.len;
    }
    PyBuffer_Release(&host);
    if (!ok || PyTuple_GET_SIZE(inert) > INERT_NAMES_MAX || PyTuple_GET_SIZE(bounds) > SIZE_BOUNDS_MAX) {
        PyErr_SetString(PyExc_ValueError, "FastPath: bad store host, too many inert names or bounds");
        return -1;
    }
    fp->inert_count = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(inert); i++) {
        PyObject *name = PyTuple_GET_ITEM(inert, i);  /* kept alive by the tuple, kept below */
        Py_ssize_t len;
        const char *utf8 = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
        if (utf8 == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "FastPath: inert property names are str");
            return -1;
        }
        fp->inert[fp->inert_count].p = (const unsigned char *)utf8;
        fp->inert[fp->inert_count++].len = len;
    }
    fp->bounds_count = (int)PyTuple_GET_SIZE(bounds);
    for (int b = 0; b < fp->bounds_count; b++) {
        fp->size_bounds[b] = PyLong_AsSsize_t(PyTuple_GET_ITEM(bounds, b));
        if (fp->size_bounds[b] == -1 && PyErr_Occurred())
            return -1;
    }
    Py_XSETREF(fp->inert_names, Py_NewRef(inert));
    return 0;
}

static void fp_dealloc(FastPathObject *fp)
{
    clear_topics(fp);
    auth_free(&fp->auth);
    PyMem_Free(fp->scratch);
    Py_XDECREF(fp->inert_names);
    Py_TYPE(fp)->tp_free((PyObject *)fp);
}

static PyObject *fp_counts(FastPathObject *fp, PyObject *unused)
{
    PyObject *out = Py_BuildValue("{sKsKsKsK}", "handled", fp->handled, "declined", fp->declined,
                                  "segment_full", fp->segment_full, "errors", fp->errors);
    for (int reason = AUTH_OK + 1; out != NULL && fp->auth.on && reason < AUTH_REASONS; reason++) {
        char name[48];
        snprintf(name, sizeof name, "auth_%s", AUTH_REASON_NAMES[reason]);
        PyObject *v = PyLong_FromUnsignedLongLong(fp->auth.declined[reason]);
        if (v == NULL || PyDict_SetItemString(out, name, v) < 0)
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
}

static PyObject *fp_set_users_m(FastPathObject *fp, PyObject *const *args, Py_ssize_t nargs)
{
    return fp_set_users(&fp->auth, args, nargs);
}

static PyObject *fp_allow_m(FastPathObject *fp, PyObject *const *args, Py_ssize_t nargs)
{
    return fp_allow(&fp->auth, args, nargs);
}

/* auth_check(frame) -> int: the verdict of fastpath_auth.c on the one frame at the start of
 * ``frame`` (AUTH_OK 0; AUTH_FRAME when it is no whole send frame take() would store: its
 * header's values, a topic of the snapshot...): what take() decides about its signature and
 * rules, nothing stored. For the tests and the fuzzer. */
static PyObject *fp_auth_check(FastPathObject *fp, PyObject *frame)
{
    Py_buffer in;
    if (fp->busy) {
        PyErr_SetString(PyExc_RuntimeError, "auth_check: a take() is under way (another thread)");
        return NULL;
    }
    if (PyObject_GetBuffer(frame, &in, PyBUF_SIMPLE) < 0)
        return NULL;
    WireRequest r;
    Py_ssize_t size = 0;
    int verdict = AUTH_FRAME;
    if (ensure_scratch(fp, in.len) == 0) {
        SendFields f;
        if (read_frame(in.buf, in.len, fp->max_frame_size, fp->scratch, &r, &size) == FRAME_READY
            && send_fields(fp, &r, &f))
            verdict = auth_verdict(&fp->auth, &r, r.send[1], NULL, 0);
    }
    PyBuffer_Release(&in);
    return PyErr_Occurred() ? NULL : PyLong_FromLong(verdict);
}

/* The text of a header value as str; None for an absent one. */
static PyObject *span_text(Span s)
{
    return s.p == NULL ? Py_NewRef(Py_None) : PyUnicode_DecodeUTF8((const char *)s.p, s.len, NULL);
}

/* A pull_request.h pull as peek() gives it. */
static PyObject *pull_tuple(const WireRequest *r, const PullFields *f, Py_ssize_t frame_size)
{
    PyObject *max_bytes = f->max_msg_bytes ? PyLong_FromLongLong(f->max_msg_bytes)
                                           : Py_NewRef(Py_None);
    if (max_bytes == NULL)
        return NULL;
    return Py_BuildValue("(niiiiiNNLLLLLLNLNN)", frame_size, (int)r->code, (int)r->opaque,
                         (int)r->flag, (int)r->version, r->serialize_type, span_text(f->group),
                         span_text(f->topic), (long long)f->queue_id, (long long)f->queue_offset,
                         (long long)f->max_msg_nums, (long long)f->sys_flag,
                         (long long)f->commit_offset, (long long)f->suspend_ms,
                         span_text(f->subscription), (long long)f->sub_version,
                         span_text(f->expression_type), max_bytes);
}

/*
 * peek(buf, pos) -> True | False | tuple: what the whole frame at ``buf[pos:]`` is.
 * - a tuple: a PULL_MESSAGE request read in C (pull_request.h), as
 *   (frame_size, code, opaque, flag, version, serialize_type, then the header's values in
 *   headers.PullMessageRequestHeader's order);
 * - False: a request or response take() would decline (no send: a heartbeat, a pull this reader
 *   does not take...), so that its caller skips the put lock and the call;
 * - True otherwise: take() decides (a send, a partial or unreadable frame).
 */
static PyObject *fp_peek(FastPathObject *fp, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer in;
    Py_ssize_t pos;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "peek(buf, pos)");
        return NULL;
    }
    if (fp->busy) {
        PyErr_SetString(PyExc_RuntimeError, "peek: a take() is under way (another thread)");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || pos > in.len) {
        PyErr_SetString(PyExc_ValueError, "peek: position outside its buffer");
        PyBuffer_Release(&in);
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)in.buf + pos;
    Py_ssize_t avail = in.len - pos;
    PyObject *out = Py_NewRef(Py_True);
    if (avail >= 4) {  /* the first frame only: scratch as long as that frame */
        Py_ssize_t total = (Py_ssize_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                                        ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
        WireRequest r;
        PullFields f;
        Py_ssize_t size = 0;
        if (total <= fp->max_frame_size && total <= avail - 4) {
            if (ensure_scratch(fp, total + 4) < 0) {
                Py_SETREF(out, NULL);
            } else if (read_frame(p, total + 4, fp->max_frame_size, fp->scratch, &r, &size)
                       == FRAME_READY) {
                if (pull_fields(&r, &f))
                    Py_SETREF(out, pull_tuple(&r, &f, size));
                else if ((r.flag & FLAG_RESPONSE) || (r.code != CODE_SEND_MESSAGE &&
                                                      r.code != CODE_SEND_MESSAGE_V2 &&
                                                      r.code != CODE_SEND_BATCH_MESSAGE))
                    Py_SETREF(out, Py_NewRef(Py_False));
            }
        }
    }
    PyBuffer_Release(&in);
    return out;
}

static PyMethodDef fp_methods[] = {
    {"take", (PyCFunction)(void (*)(void))fp_take, METH_FASTCALL,
     "Every frame it can handle from buf[pos:], stored and answered; see broker/_native/fastpath.h."},
    {"put_topic", (PyCFunction)fp_put_topic, METH_VARARGS,
     "One topic of the snapshot added, changed or, with 0, removed: put_topic(topic, nums)."},
    {"set_topics", (PyCFunction)fp_set_topics, METH_O,
     "The topics it may store to: {topic: write queue nums}, replacing the last snapshot."},
    {"counts", (PyCFunction)fp_counts, METH_NOARGS,
     "Frames handled, declined and left for a segment roll since creation (with auth: the "
     "sends declined by the check, by reason)."},
    {"set_users", (PyCFunction)(void (*)(void))fp_set_users_m, METH_FASTCALL,
     "set_users(version, {name: (secret, enabled, super)}): the users signed sends are checked "
     "against, replacing the last snapshot and emptying the allowed pairs."},
    {"allow", (PyCFunction)(void (*)(void))fp_allow_m, METH_FASTCALL,
     "allow(version, user, topic) -> bool: a send the guard admitted, kept while version holds."},
    {"peek", (PyCFunction)(void (*)(void))fp_peek, METH_FASTCALL,
     "peek(buf, pos) -> True | False | tuple: the frame there a send take() may store (True), "
     "a pull read in C (tuple), or neither (False); see fastpath.c."},
    {"auth_check", (PyCFunction)fp_auth_check, METH_O,
     "The signature and rules check's verdict (0: ok) on one send frame."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "orbitmq._native._speedups.broker.FastPath",
    .tp_basicsize = sizeof(FastPathObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The native fast path of plain sends (broker/_native/fastpath.h).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fp_init,
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_methods = fp_methods,
};

