/*
 * fastpath_auth.c: the check of a signed send (see fastpath_auth.h), over hmac_sha1.c.
 */
#include "broker/_native/fastpath_auth.h"

const char *const AUTH_REASON_NAMES[AUTH_REASONS] = {
    "ok", "frame", "no_key", "unsigned", "unknown_user", "disabled_user", "bad_signature",
    "not_allowed", "fields",
};


static uint32_t auth_hash(const unsigned char *a, Py_ssize_t a_len, const unsigned char *b,
                          Py_ssize_t b_len)
{
    uint32_t h = 2166136261u;  /* FNV-1a over a, a separator that is no UTF-8 byte, b */
    for (Py_ssize_t i = 0; i < a_len; i++)
        h = (h ^ a[i]) * 16777619u;
    h = (h ^ 0xFF) * 16777619u;
    for (Py_ssize_t i = 0; i < b_len; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* -- the users ------------------------------------------------------------------------------ */

static void auth_clear_users(AuthState *a)
{
    for (Py_ssize_t i = 0; i < a->user_count; i++) {
        secure_wipe(&a->users[i].key, sizeof a->users[i].key);
        PyMem_Free(a->users[i].name);
    }
    PyMem_Free(a->users);
    PyMem_Free(a->user_slots);
    a->users = NULL;
    a->user_slots = NULL;
    a->user_count = 0;
    a->user_mask = 0;
}

static void auth_clear_pairs(AuthState *a)
{
    for (size_t i = 0; a->pairs != NULL && i <= a->pair_mask; i++)
        PyMem_Free(a->pairs[i].key);
    PyMem_Free(a->pairs);
    a->pairs = NULL;
    a->pair_count = 0;
    a->pair_mask = 0;
}

static const AuthUser *auth_find_user(const AuthState *a, const unsigned char *name, Py_ssize_t n)
{
    if (a->user_slots == NULL)
        return NULL;
    size_t i = auth_hash(name, n, NULL, 0) & a->user_mask;
    while (a->user_slots[i] != 0) {
        const AuthUser *u = &a->users[a->user_slots[i] - 1];
        if (u->name_len == n && memcmp(u->name, name, (size_t)n) == 0)
            return u;
        i = (i + 1) & a->user_mask;
    }
    return NULL;
}

/* set_users(version, {name: (secret: bytes, enabled: bool, super: bool)}): the registry's users,
 * replacing the last snapshot and emptying the allowed pairs. Returns the users kept (names
 * that are not str, or values of another shape, raise: Python builds this dict). */
PyObject *fp_set_users(AuthState *a, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_users(version: int, users: dict)");
        return NULL;
    }
    unsigned long long version = PyLong_AsUnsignedLongLong(args[0]);
    if (version == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    PyObject *table = args[1];
    Py_ssize_t n = PyDict_GET_SIZE(table), cap = 16, i = 0, count = 0;
    while (cap < 2 * n + 2)
        cap <<= 1;
    AuthUser *users = PyMem_Calloc((size_t)(n ? n : 1), sizeof(AuthUser));
    Py_ssize_t *slots = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
    if (users == NULL || slots == NULL) {
        PyMem_Free(users);
        PyMem_Free(slots);
        return PyErr_NoMemory();
    }
    AuthState built = {0};
    built.users = users;
    built.user_slots = slots;
    built.user_mask = (size_t)(cap - 1);
    PyObject *key, *value;
    while (PyDict_Next(table, &i, &key, &value)) {
        Py_ssize_t len;
        const char *utf8 = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
        if (utf8 == NULL || !PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 3 ||
            !PyBytes_Check(PyTuple_GET_ITEM(value, 0))) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError,
                                "set_users: {name: str -> (secret: bytes, enabled, super)}");
            auth_clear_users(&built);
            return NULL;
        }
        int enabled = PyObject_IsTrue(PyTuple_GET_ITEM(value, 1));
        int super = PyObject_IsTrue(PyTuple_GET_ITEM(value, 2));
        AuthUser *u = &users[count];
        u->name = PyMem_Malloc((size_t)(len ? len : 1));
        if (enabled < 0 || super < 0 || u->name == NULL) {
            PyMem_Free(u->name);
            u->name = NULL;
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            auth_clear_users(&built);
            return NULL;
        }
        memcpy(u->name, utf8, (size_t)len);
        u->name_len = len;
        PyObject *secret = PyTuple_GET_ITEM(value, 0);
        hmac_sha1_key(&u->key, (const unsigned char *)PyBytes_AS_STRING(secret),
                      (size_t)PyBytes_GET_SIZE(secret));
        u->enabled = enabled;
        u->super = super;
        built.user_count = ++count;
        size_t s = auth_hash(u->name, len, NULL, 0) & built.user_mask;
        while (slots[s] != 0)
            s = (s + 1) & built.user_mask;
        slots[s] = count;
    }
    auth_clear_users(a);
    auth_clear_pairs(a);
    a->users = built.users;
    a->user_slots = built.user_slots;
    a->user_mask = built.user_mask;
    a->user_count = built.user_count;
    a->version = version;
    return PyLong_FromSsize_t(count);
}

/* -- the allowed pairs ---------------------------------------------------------------------- */

static const AuthPair *auth_find_pair(const AuthState *a, const unsigned char *user,
                                      Py_ssize_t user_len, const unsigned char *topic,
                                      Py_ssize_t topic_len)
{
    if (a->pairs == NULL)
        return NULL;
    uint32_t h = auth_hash(user, user_len, topic, topic_len);
    size_t i = h & a->pair_mask;
    while (a->pairs[i].key != NULL) {
        const AuthPair *p = &a->pairs[i];
        if (p->hash == h && p->len == 2 + user_len + topic_len &&
            ((Py_ssize_t)p->key[0] << 8 | p->key[1]) == user_len &&
            memcmp(p->key + 2, user, (size_t)user_len) == 0 &&
            memcmp(p->key + 2 + user_len, topic, (size_t)topic_len) == 0)
            return p;
        i = (i + 1) & a->pair_mask;
    }
    return NULL;
}

/* Puts a pair into a table of ``mask + 1`` slots (a free one is there: kept at most half full). */
static void auth_place_pair(AuthPair *table, size_t mask, AuthPair pair)
{
    size_t i = pair.hash & mask;
    while (table[i].key != NULL)
        i = (i + 1) & mask;
    table[i] = pair;
}

/* allow(version, user, topic) -> bool: the guard admitted a send of ``user`` to ``topic`` under
 * the registry's ``version``. Kept only when that is still the snapshot's version (a change in
 * between emptied the set, and the guard decided on rules that may be gone), and while the set
 * holds fewer than ALLOWED_PAIRS_MAX pairs. */
PyObject *fp_allow(AuthState *a, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t user_len, topic_len;
    if (nargs != 3 || !PyUnicode_Check(args[1]) || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "allow(version: int, user: str, topic: str)");
        return NULL;
    }
    unsigned long long version = PyLong_AsUnsignedLongLong(args[0]);
    if (version == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    const char *user = PyUnicode_AsUTF8AndSize(args[1], &user_len);
    const char *topic = user != NULL ? PyUnicode_AsUTF8AndSize(args[2], &topic_len) : NULL;
    if (topic == NULL)
        return NULL;
    if (version != a->version || !a->on || user_len > AUTH_NAME_MAX || topic_len > AUTH_NAME_MAX ||
        a->pair_count >= ALLOWED_PAIRS_MAX)
        Py_RETURN_FALSE;
    const unsigned char *u = (const unsigned char *)user, *t = (const unsigned char *)topic;
    if (auth_find_pair(a, u, user_len, t, topic_len) != NULL)
        Py_RETURN_TRUE;
    if (a->pairs == NULL || (size_t)(a->pair_count + 1) * 2 > a->pair_mask + 1) {
        size_t cap = a->pairs == NULL ? 64 : 2 * (a->pair_mask + 1);
        AuthPair *grown = PyMem_Calloc(cap, sizeof(AuthPair));
        if (grown == NULL)
            return PyErr_NoMemory();
        for (size_t i = 0; a->pairs != NULL && i <= a->pair_mask; i++)
            if (a->pairs[i].key != NULL)
                auth_place_pair(grown, cap - 1, a->pairs[i]);
        PyMem_Free(a->pairs);
        a->pairs = grown;
        a->pair_mask = cap - 1;
    }
    AuthPair pair = {auth_hash(u, user_len, t, topic_len), PyMem_Malloc((size_t)(2 + user_len + topic_len)),
                     2 + user_len + topic_len};
    if (pair.key == NULL)
        return PyErr_NoMemory();
    pair.key[0] = (unsigned char)(user_len >> 8);
    pair.key[1] = (unsigned char)user_len;
    memcpy(pair.key + 2, u, (size_t)user_len);
    memcpy(pair.key + 2 + user_len, t, (size_t)topic_len);
    auth_place_pair(a->pairs, a->pair_mask, pair);
    a->pair_count++;
    Py_RETURN_TRUE;
}

/* -- the check ------------------------------------------------------------------------------ */

static int span_is(Span s, const char *text, Py_ssize_t n)
{
    return s.len == n && memcmp(s.p, text, (size_t)n) == 0;
}

/* Byte order of two keys, a shorter prefix first (String.compareTo for ASCII). */
static int key_before(Span x, Span y)
{
    Py_ssize_t n = x.len < y.len ? x.len : y.len;
    int c = memcmp(x.p, y.p, (size_t)n);
    return c < 0 || (c == 0 && x.len < y.len);
}

/* A signature to check: what auth_prepare found, hashed by sig_job_run (the user's key in the
 * snapshot, spans of the frame). */
typedef struct {
    const HmacKey *key;
    Span signature;
    Span values[EXT_FIELDS_MAX];  /* the extFields' values in key order, Signature left out */
    int value_count;
    const unsigned char *body;
    Py_ssize_t body_len;
    Span user;  /* the AccessKey */
    int check;  /* 1: the signature is to be compared, then ``after`` is the verdict */
    int after;  /* AUTH_OK or AUTH_NOT_ALLOWED: the rules' verdict once the signature holds */
    int ok;     /* sig_job_run: the signature matched */
} SigJob;

/* -- the stateful strategy's record (security/stateful.py) ------------------------------------ */

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

/* 1 when ``session`` holds user ``name``, under ``version``, unexpired at ``now_ms``. */
static int session_holds(const unsigned char *session, unsigned long long version,
                         long long now_ms, Span name)
{
    Py_ssize_t len = session[16];
    return len > 0 && len <= AUTH_SESSION_NAME_MAX && len == name.len &&
           get_le64(session) == version && now_ms < (long long)get_le64(session + 8) &&
           memcmp(session + AUTH_SESSION_HEAD, name.p, (size_t)len) == 0;
}

static void session_remember(unsigned char *session, unsigned long long version,
                             long long expires_ms, Span name)
{
    if (name.len <= 0 || name.len > AUTH_SESSION_NAME_MAX)
        return;  /* longer than any user name: nothing to remember */
    put_le64(session, version);
    put_le64(session + 8, (uint64_t)expires_ms);
    session[16] = (unsigned char)name.len;
    memcpy(session + AUTH_SESSION_HEAD, name.p, (size_t)name.len);
}

/* Everything of the check on request ``r`` (a send to ``topic``, its V2 "b") but the hash:
 * a refusal (no key, unknown user...) as the verdict, or AUTH_OK with ``job`` to run (none
 * when the connection's ``session`` already vouches for the user). */
static int auth_prepare(const AuthState *a, const WireRequest *r, Span topic, SigJob *job,
                        const unsigned char *session, long long now_ms)
{
    int bit = r->code == CODE_SEND_MESSAGE ? 1 : r->code == CODE_SEND_MESSAGE_V2 ? 2 : 4;
    job->check = 0;
    job->after = AUTH_OK;
    if (!a->on || (a->open_codes & bit))
        return AUTH_OK;
    if (r->ext_overflow || topic.p == NULL || topic.len == 0)
        return AUTH_FIELDS;
    int order[EXT_FIELDS_MAX];
    Span access_key = {NULL, 0}, signature = {NULL, 0};
    for (int i = 0; i < r->ext_count; i++) {  /* insertion sort by key; ASCII keys only */
        Span k = r->ext_key[i];
        for (Py_ssize_t c = 0; c < k.len; c++)
            if (k.p[c] & 0x80)
                return AUTH_FIELDS;
        if (span_is(k, "AccessKey", 9))
            access_key = r->ext_value[i];
        else if (span_is(k, "Signature", 9))
            signature = r->ext_value[i];
        else if (span_is(k, "topic", 5))
            return AUTH_FIELDS;
        int j = i;
        while (j > 0 && key_before(k, r->ext_key[order[j - 1]])) {
            order[j] = order[j - 1];
            j--;
        }
        if (j > 0 && span_is(k, (const char *)r->ext_key[order[j - 1]].p,
                             r->ext_key[order[j - 1]].len))
            return AUTH_FIELDS;  /* a key twice: which one counts is the Python decoder's */
        order[j] = i;
    }
    if (access_key.p == NULL || access_key.len == 0)
        return AUTH_NO_KEY;
    const AuthUser *user = auth_find_user(a, access_key.p, access_key.len);
    if (user == NULL)
        return AUTH_UNKNOWN_USER;
    if (!user->enabled)
        return AUTH_DISABLED;
    if (signature.p == NULL || signature.len == 0)
        return AUTH_UNSIGNED;
    if (a->authorization && !user->super &&
        auth_find_pair(a, access_key.p, access_key.len, topic.p, topic.len) == NULL)
        job->after = AUTH_NOT_ALLOWED;
    job->user = access_key;
    if (session != NULL && session_holds(session, a->version, now_ms, access_key))
        return AUTH_OK;  /* stateful: this connection proved it is this user */
    if (signature.len != SHA1_BASE64)
        return AUTH_BAD_SIGNATURE;  /* no canonical Base64 of a digest: nothing to hash */
    job->key = &user->key;
    job->signature = signature;
    job->value_count = 0;
    for (int i = 0; i < r->ext_count; i++)
        if (!span_is(r->ext_key[order[i]], "Signature", 9))
            job->values[job->value_count++] = r->ext_value[order[i]];
    job->body = r->body;
    job->body_len = r->body_len;
    job->check = 1;
    return AUTH_OK;
}

/* The HMAC of a prepared check, compared in constant time. */
static void sig_job_run(SigJob *job)
{
    Sha1 s;
    unsigned char digest[SHA1_DIGEST];
    char expected[SHA1_BASE64];
    hmac_sha1_begin(job->key, &s);
    for (int i = 0; i < job->value_count; i++)
        sha1_update(&s, job->values[i].p, (size_t)job->values[i].len);
    if (job->body_len > 0)
        sha1_update(&s, job->body, (size_t)job->body_len);
    hmac_sha1_end(job->key, &s, digest);
    base64_digest(digest, expected);
    job->ok = equal_in_constant_time(job->signature.p, (const unsigned char *)expected,
                                     SHA1_BASE64);
    secure_wipe(&s, sizeof s);
}

/* The whole check of one request, in this thread; under the stateful strategy, a signature
 * that holds makes the connection's ``session`` remember its user. */
int auth_verdict(const AuthState *a, const WireRequest *r, Span topic, unsigned char *session,
                 long long now_ms)
{
    SigJob job;
    unsigned char *record = a->stateful_ms > 0 ? session : NULL;
    int prepared = auth_prepare(a, r, topic, &job, record, now_ms);
    if (prepared != AUTH_OK || !job.check)
        return prepared != AUTH_OK ? prepared : job.after;
    sig_job_run(&job);
    if (!job.ok)
        return AUTH_BAD_SIGNATURE;
    if (record != NULL)
        session_remember(record, a->version, now_ms + a->stateful_ms, job.user);
    return job.after;
}

void auth_free(AuthState *a)
{
    auth_clear_users(a);
    auth_clear_pairs(a);
}
