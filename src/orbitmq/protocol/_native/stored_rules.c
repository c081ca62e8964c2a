/*
 * stored_rules.c: the rules of stored_rules.h (the properties rule, the topic rule, the checks of a
 * stored message, the refusals' wording). Every byte read is bounds-checked first.
 */
#include "protocol/_native/stored_rules.h"

PyObject *remote_protocol_error;

/* -- properties: the rule of orbitmq/protocol/properties.py ----------------------------------- */

/* Strict UTF-8, as Python's decoder: no overlongs, no surrogates, nothing past U+10FFFF. */
int utf8_valid(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            while (i + 8 <= n) {  /* ASCII, 8 bytes at a time */
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull)
                    break;
                i += 8;
            }
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

typedef struct {
    const unsigned char *name;  /* NULL: free slot */
    Py_ssize_t len;
} NameSlot;

uint32_t name_hash(const unsigned char *s, Py_ssize_t n)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

/*
 * The names met so far, to refuse one given twice: a short list compared one by one (nearly
 * every message has a handful of properties), then an open-addressing table once the list is
 * full, so that a peer's 10,000 names cost linear time. The table holds at most
 * (n + 1) / 3 names for a blob of n bytes (a well-formed item takes at least 3 bytes with its
 * separator) in twice as many slots, so it never fills.
 */
#define NAMES_LISTED 16
#define NAME_SLOTS_SMALL 64

typedef struct {
    NameSlot list[NAMES_LISTED];
    int listed;
    NameSlot *slots;  /* NULL until the list is full */
    size_t mask;
    Py_ssize_t blob_len;
    NameSlot small[NAME_SLOTS_SMALL];
} NameSet;

static int table_seen(NameSet *set, const unsigned char *name, Py_ssize_t len)
{
    size_t i = name_hash(name, len) & set->mask;
    while (set->slots[i].name != NULL) {
        if (set->slots[i].len == len && memcmp(set->slots[i].name, name, (size_t)len) == 0)
            return 1;
        i = (i + 1) & set->mask;
    }
    set->slots[i].name = name;
    set->slots[i].len = len;
    return 0;
}

/* 1 when the name was met before, 0 when new (now recorded), -1 when out of memory. */
static int name_seen(NameSet *set, const unsigned char *name, Py_ssize_t len)
{
    if (set->slots == NULL) {
        for (int k = 0; k < set->listed; k++)
            if (set->list[k].len == len && memcmp(set->list[k].name, name, (size_t)len) == 0)
                return 1;
        if (set->listed < NAMES_LISTED) {
            set->list[set->listed].name = name;
            set->list[set->listed].len = len;
            set->listed++;
            return 0;
        }
        size_t want = 2 * (size_t)((set->blob_len + 1) / 3 + 1), cap = NAME_SLOTS_SMALL;
        while (cap < want)
            cap <<= 1;
        if (cap > NAME_SLOTS_SMALL) {
            set->slots = PyMem_Calloc(cap, sizeof(NameSlot));
            if (set->slots == NULL)
                return -1;
        } else {
            memset(set->small, 0, sizeof set->small);
            set->slots = set->small;
        }
        set->mask = cap - 1;
        for (int k = 0; k < set->listed; k++)
            table_seen(set, set->list[k].name, set->list[k].len);
    }
    return table_seen(set, name, len);
}

static void names_free(NameSet *set)
{
    if (set->slots != NULL && set->slots != set->small)
        PyMem_Free(set->slots);
}

static void note_found(PropsFound *f, const unsigned char *name, Py_ssize_t name_len,
                       const unsigned char *value, Py_ssize_t value_len)
{
    Span *to = NULL;
    if (name_len == 4 && memcmp(name, "TAGS", 4) == 0)
        to = &f->tags;
    else if (name_len == 4 && memcmp(name, "KEYS", 4) == 0)
        to = &f->keys;
    else if (name_len == 8 && memcmp(name, "UNIQ_KEY", 8) == 0)
        to = &f->uniq;
    else if (name_len == 5 && memcmp(name, "DELAY", 5) == 0)
        to = &f->delay;
    else if (name_len == 8 && memcmp(name, "TRAN_MSG", 8) == 0)
        to = &f->tran_msg;
    if (to != NULL) {
        to->p = value;
        to->len = value_len;
    }
}

/*
 * Checks ``p[0:n]`` against the properties rule, in the rule's order; fills ``found`` and, on a
 * problem with an item, ``*item_no`` (1-based). Returns PROPS_OK or the problem.
 */
int props_check(const unsigned char *p, Py_ssize_t n, PropsFound *found,
                       Py_ssize_t *item_no)
{
    memset(found, 0, sizeof *found);
    *item_no = 0;
    if (n == 0)
        return PROPS_OK;
    if (!utf8_valid(p, n))
        return PROPS_NOT_UTF8;
    if (memchr(p, 0, (size_t)n) != NULL)
        return PROPS_NUL;
    Py_ssize_t end = p[n - 1] == 0x02 ? n - 1 : n;  /* without the final separator */
    NameSet names;
    names.listed = 0;
    names.slots = NULL;
    names.blob_len = n;
    int result = PROPS_OK;
    Py_ssize_t i = 0, no = 0;
    for (;;) {
        no++;
        const unsigned char *item = p + i;
        const unsigned char *stop = memchr(item, 0x02, (size_t)(end - i));
        Py_ssize_t item_len = stop != NULL ? stop - item : end - i;
        const unsigned char *sep = memchr(item, 0x01, (size_t)item_len);
        if (sep == NULL) {
            result = PROPS_NO_SEPARATOR;
            break;
        }
        if (sep == item) {
            result = PROPS_EMPTY_NAME;
            break;
        }
        Py_ssize_t name_len = sep - item, value_len = item_len - name_len - 1;
        if (memchr(sep + 1, 0x01, (size_t)value_len) != NULL) {
            result = PROPS_SECOND_SEPARATOR;
            break;
        }
        int seen = name_seen(&names, item, name_len);
        if (seen != 0) {
            result = seen > 0 ? PROPS_REPEATED : PROPS_NO_MEMORY;
            break;
        }
        note_found(found, item, name_len, sep + 1, value_len);
        if (stop == NULL)
            break;
        i += item_len + 1;
    }
    names_free(&names);
    if (result != PROPS_OK)
        *item_no = no;
    return result;
}

/* RemoteProtocolError with the message the stored package gives (prefixed for a batch entry). */
void raise_protocol(PyObject *reason, Py_ssize_t entry_pos)
{
    if (reason == NULL)
        return;
    PyObject *msg = reason;
    if (entry_pos >= 0) {
        msg = PyUnicode_FromFormat("batch entry at %zd: %U", entry_pos, reason);
        Py_DECREF(reason);
        if (msg == NULL)
            return;
    }
    PyErr_SetObject(remote_protocol_error, msg);
    Py_DECREF(msg);
}

void raise_props(int problem, Py_ssize_t item_no, Py_ssize_t entry_pos)
{
    PyObject *reason = NULL;
    switch (problem) {
    case PROPS_NOT_UTF8:
        reason = PyUnicode_FromString("message properties are not UTF-8");
        break;
    case PROPS_NUL:
        reason = PyUnicode_FromString("message properties contain a NUL character");
        break;
    case PROPS_NO_SEPARATOR:
        reason = PyUnicode_FromFormat("message property %zd has no name/value separator", item_no);
        break;
    case PROPS_EMPTY_NAME:
        reason = PyUnicode_FromFormat("message property %zd has an empty name", item_no);
        break;
    case PROPS_SECOND_SEPARATOR:
        reason = PyUnicode_FromFormat("message property %zd has a second name/value separator",
                                      item_no);
        break;
    case PROPS_REPEATED:
        reason = PyUnicode_FromFormat("message property %zd repeats an earlier name", item_no);
        break;
    default:
        PyErr_NoMemory();
        return;
    }
   raise_protocol(reason, entry_pos);
}

void raise_props_size(Py_ssize_t size, Py_ssize_t entry_pos)
{
   raise_protocol(PyUnicode_FromFormat("message properties take %zd bytes, over %d", size,
                                        PROPERTIES_SIZE_MAX),
                   entry_pos);
}

void read_entry(const unsigned char *b, Py_ssize_t pos, BatchEntry *e)
{
    e->pos = pos;
    e->flag = get_i32(b + pos + BATCH_FLAG_AT);
    e->body_len = get_i32(b + pos + BATCH_BODY_LEN_AT);
    e->body = b + pos + BATCH_BODY_AT;
    e->props_len = get_i16(e->body + e->body_len);
    e->props = e->body + e->body_len + 2;
}

/* -- a stored message: the checks of stored._layout._read ---------------------------------- */

/* stored._layout._topic_problem: 1..127 bytes of UTF-8 that can name a queue directory. */
int topic_ok(const unsigned char *t, Py_ssize_t n)
{
    if (!utf8_valid(t, n) || memchr(t, '/', (size_t)n) != NULL || memchr(t, 0, (size_t)n) != NULL)
        return 0;
    return !((n == 1 && t[0] == '.') || (n == 2 && t[0] == '.' && t[1] == '.'));
}


/* stored._layout._read, the same checks in the same order: 1 when the bytes at ``m`` (``avail``
 * of them up to the limit) are a stored message, 0 when not, -1 on a memory error. */
int read_stored(const unsigned char *m, Py_ssize_t avail, StoredRead *r)
{
    if (avail < BLANK_ENTRY_SIZE)
        return 0;
    int32_t total = get_i32(m + TOTALSIZE_AT);
    if (get_i32(m + MAGICCODE_AT) != MAGIC_CODE)
        return 0;
    if (total < MIN_STORED_SIZE || total > avail)
        return 0;
    int32_t sys_flag = get_i32(m + SYSFLAG_AT);
    Py_ssize_t head = header_size(sys_flag);
    if (total < head + TAIL_MIN)
        return 0;
    if (get_i32(m + QUEUEID_AT) < 0 || get_i64(m + QUEUEOFFSET_AT) < 0)
        return 0;
    Py_ssize_t body_len = get_i32(m + head - HEADER_TAIL_SIZE + TAIL_BODY_LENGTH_AT);
    if (body_len < 0 || head + body_len + BODY_TAIL > total)
        return 0;
    Py_ssize_t at = head + body_len;
    Py_ssize_t topic_len = m[at];
    if (topic_len == 0 || topic_len > TOPIC_SIZE_MAX || head + body_len + BODY_TAIL + topic_len > total)
        return 0;
    if (!topic_ok(m + at + 1, topic_len))
        return 0;
    r->topic = m + at + 1;
    r->topic_len = topic_len;
    at += 1 + topic_len;
    Py_ssize_t props_len = get_i16(m + at);
    if (head + body_len + BODY_TAIL + topic_len + props_len != total)
        return 0;
    Py_ssize_t item_no;
    int problem = props_check(m + at + 2, props_len, &r->found, &item_no);
    if (problem == PROPS_NO_MEMORY) {
        PyErr_NoMemory();
        return -1;
    }
    if (problem != PROPS_OK)
        return 0;
    r->total = total;
    r->sys_flag = sys_flag;
    return 1;
}
