/*
 * speedups_fuzz.c: a libFuzzer target over the native entry points of orbitmq._native._speedups
 * (each room's part: .protocol, .store, .broker), called as Python calls them (an embedded
 * interpreter imports the module built with -fsanitize=fuzzer-no-link,address,undefined), so
 * that their Python-object glue (buffers, reference counts, the queue-offset dict) is fuzzed
 * with the byte parsing.
 *
 * The first input byte picks the entry point (its low four bits), the rest is its untrusted input:
 *   0..3  FastPath.peek() and take() over the bytes as a connection's buffer, as
 *         broker/fast_path.py calls them (again after each frame they decline, the frame skipped as
 *         the Python decoder would), into a 256 KiB segment that starts over when full; a pull
 *         peek() reads must decode the same in Python (fuzz_twins.pull)
 *   4     encode_wire_single(properties = the bytes)
 *   5     encode_wire_batch(body = the bytes), and check_wire_batch of the same
 *   6     scan_stored(the bytes, as a commit log segment), and queue_runs(the bytes, as consume
 *         queue entries), unbounded, bounded by a physical end and by tags codes; runs_tags_in
 *         (the bytes, as a run of the commit log)
 *   7     java_string_hash / index_key_hash of the bytes as text
 *   8..9  take() as 0..3 on a fast path with authentication and authorization on (users root,
 *         Super; alice, Normal, her pair with FastPlain allowed; bob, disabled), so that signed
 *         frames reach the signature check (broker/_native/fastpath_auth.c)
 *   10..11 the same under the stateful strategy, with a connection record (security/stateful.py)
 *         that starts empty (10) or remembering root (11), so that unhashed frames are taken
 *   12    auth_check() of the bytes as one frame on that fast path, then allow() of the bytes'
 *         halves as a user and a topic, and set_users() again (the pairs emptied)
 *   13    hmac_sha1(key = the first byte's worth of bytes, data = the rest): the SHA-NI rounds
 *         and the FIPS rounds must give the same digest
 *   14    the store (fuzz/fuzz_twins.py's store): dispatch_plan over the bytes as a commit log
 *         range, against the Python read and IndexService's hashes; index_put of its planned
 *         entries and of the bytes' into an index file made of the bytes, against put_hash
 *   15    the columns (fuzz_twins.columns): stored_columns over the bytes as a pull body, against
 *         stored_columns_py; encode_batch_columns over columns made of the bytes (Arrow offsets
 *         that point anywhere), against encode_batch_columns_py
 * A disagreement with a Python twin (14, 15) aborts as a sanitizer finding does.
 * Built and run by scripts/sanitize-speedups.sh --fuzz (make fuzz). Refusals are expected
 * outcomes (RemoteProtocolError, ValueError...); anything a sanitizer reports is a bug.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SEGMENT_SIZE (256 * 1024)
#define BLANK_ROOM 8

static PyObject *protocol, *store, *twins, *fast_path, *signed_path, *stateful_path, *session,
    *users, *segment, *queue_table, *born, *topic_part, *store_host, *tag_codes, *tag_names;

#define SESSION_SIZE 81  /* security/stateful.py: u64 version, i64 expiry ms, u8 length, name */

/* The connection record for one input: empty, or root's under version 1 until far ahead. */
static void reset_session(int remember_root)
{
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(session);
    memset(p, 0, SESSION_SIZE);
    if (!remember_root)
        return;
    p[0] = 1;  /* version 1, little-endian */
    for (int i = 0; i < 8; i++)
        p[8 + i] = (unsigned char)(0x7FFFFFFFFFFFLL >> (8 * i));
    p[16] = 4;
    memcpy(p + 17, "root", 4);
}
static long long seg_pos;

static void die(const char *what)
{
    PyErr_Print();
    fprintf(stderr, "speedups_fuzz: %s\n", what);
    abort();
}

/* The queue-offset table as a store holds it: every queue of the snapshot's topics at offset 0
 * but FastPlain's queue 3 (a queue the store has not loaded: its sends are declined). */
static void fill_queue_table(void)
{
    static const struct { const char *topic; int queues; } known[] = {
        {"FastPlain", 3}, {"T", 1}, {"\xc3\xa9t\xc3\xa9", 2}};
    PyDict_Clear(queue_table);
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        for (int q = 0; q < known[k].queues; q++) {
            PyObject *key = Py_BuildValue("(si)", known[k].topic, q), *zero = PyLong_FromLong(0);
            if (key == NULL || zero == NULL || PyDict_SetItem(queue_table, key, zero) < 0)
                die("queue table");
            Py_DECREF(key);
            Py_DECREF(zero);
        }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    Py_InitializeEx(0);
    PyObject *speedups = PyImport_ImportModule("orbitmq._native._speedups");
    if (speedups == NULL)
        die("cannot import orbitmq._native._speedups (PYTHONPATH?)");
    protocol = PyObject_GetAttrString(speedups, "protocol");
    store = PyObject_GetAttrString(speedups, "store");
    PyObject *broker = PyObject_GetAttrString(speedups, "broker");
    twins = PyImport_ImportModule("fuzz_twins");  /* fuzz/fuzz_twins.py */
    if (protocol == NULL || store == NULL || broker == NULL || twins == NULL)
        die("the rooms' modules, or fuzz/fuzz_twins.py (PYTHONPATH?)");
    PyObject *cls = PyObject_GetAttrString(broker, "FastPath");
    store_host = PyBytes_FromStringAndSize("\x7f\x00\x00\x01\x00\x00\x2a\x9f", 8);
    born = PyBytes_FromStringAndSize("\x0a\x01\x02\x03\x00\x00\x9c\x40", 8);
    topic_part = PyBytes_FromStringAndSize("\x09" "FastPlain", 10);
    /* A TAG subscription: "TagA" and two tags that share a code ("Aa", "BB"), and 0 */
    tag_codes = Py_BuildValue("(iii)", 2112, 2598919, 0);
    tag_names = Py_BuildValue("(yyy)", "Aa", "BB", "TagA");
    PyObject *inert = Py_BuildValue("(ssssss)", "UNIQ_KEY", "KEYS", "TAGS", "WAIT", "MSG_REGION",
                                    "TRACE_ON");
    PyObject *bounds = Py_BuildValue("(iiiiii)", 1024, 4096, 524288, 1048576, 2097152, 4194304);
    if (cls == NULL || store_host == NULL || born == NULL || inert == NULL || bounds == NULL ||
        tag_codes == NULL || tag_names == NULL)
        die("setup");
    fast_path = PyObject_CallFunction(cls, "OnnnOOn", store_host, (Py_ssize_t)6000,
                                      (Py_ssize_t)(SEGMENT_SIZE - 8), (Py_ssize_t)(1 << 20), inert,
                                      bounds, (Py_ssize_t)4096);
    if (fast_path == NULL)
        die("FastPath()");
    PyObject *topics = Py_BuildValue("{sisisi}", "FastPlain", 4, "T", 1, "\xc3\xa9t\xc3\xa9", 2);
    if (topics == NULL || PyObject_CallMethod(fast_path, "set_topics", "O", topics) == NULL)
        die("set_topics");
    PyObject *auth = Py_BuildValue("(O())", Py_True);
    signed_path = auth == NULL ? NULL : PyObject_CallFunction(
        cls, "OnnnOOnO", store_host, (Py_ssize_t)6000, (Py_ssize_t)(SEGMENT_SIZE - 8),
        (Py_ssize_t)(1 << 20), inert, bounds, (Py_ssize_t)4096, auth);
    users = Py_BuildValue("{s(y#OO)s(y#OO)s(y#OO)}", "root", "root-secret-1", (Py_ssize_t)13,
                          Py_True, Py_True, "alice", "alice-secret-1", (Py_ssize_t)14, Py_True,
                          Py_False, "bob", "bob-secret-11", (Py_ssize_t)13, Py_False, Py_False);
    if (signed_path == NULL || users == NULL ||
        PyObject_CallMethod(signed_path, "set_topics", "O", topics) == NULL ||
        PyObject_CallMethod(signed_path, "set_users", "iO", 1, users) == NULL ||
        PyObject_CallMethod(signed_path, "allow", "iss", 1, "alice", "FastPlain") == NULL)
        die("the signed fast path");
    PyObject *stateful = Py_BuildValue("(O()i)", Py_True, 60000);
    stateful_path = stateful == NULL ? NULL : PyObject_CallFunction(
        cls, "OnnnOOnO", store_host, (Py_ssize_t)6000, (Py_ssize_t)(SEGMENT_SIZE - 8),
        (Py_ssize_t)(1 << 20), inert, bounds, (Py_ssize_t)4096, stateful);
    session = PyByteArray_FromStringAndSize(NULL, SESSION_SIZE);
    if (stateful_path == NULL || session == NULL ||
        PyObject_CallMethod(stateful_path, "set_topics", "O", topics) == NULL ||
        PyObject_CallMethod(stateful_path, "set_users", "iO", 1, users) == NULL ||
        PyObject_CallMethod(stateful_path, "allow", "iss", 1, "alice", "FastPlain") == NULL)
        die("the stateful fast path");
    segment = PyByteArray_FromStringAndSize(NULL, SEGMENT_SIZE);
    queue_table = PyDict_New();
    if (segment == NULL || queue_table == NULL)
        die("segment");
    memset(PyByteArray_AS_STRING(segment), 0, SEGMENT_SIZE);
    fill_queue_table();
    return 0;
}

/* take() as the broker calls it: again after every declined frame, until no whole frame is left. */
static void fuzz_take(PyObject *fast_path, const uint8_t *data, size_t size, PyObject *record)
{
    PyObject *buf = PyByteArray_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    if (buf == NULL)
        die("buffer");
    Py_ssize_t pos = 0;
    for (int rounds = 0; rounds < 1000; rounds++) {
        PyObject *kind = PyObject_CallMethod(fast_path, "peek", "On", buf, pos);
        if (kind == NULL)
            die("peek raised");  /* it never raises on a peer's bytes */
        if (PyTuple_Check(kind)) {  /* a pull read in C: the Python decoder must read the same */
            Py_ssize_t frame_size = PyLong_AsSsize_t(PyTuple_GET_ITEM(kind, 0));
            if (frame_size < 8 || frame_size > (Py_ssize_t)size - pos)
                abort();
            PyObject *frame = PyBytes_FromStringAndSize((const char *)data + pos, frame_size);
            PyObject *same = frame == NULL ? NULL
                                           : PyObject_CallMethod(twins, "pull", "OO", frame, kind);
            if (same == NULL)
                die("fuzz_twins.pull: peek's pull and the Python decoder's disagree (or raised)");
            Py_DECREF(same);
            Py_DECREF(frame);
            Py_DECREF(kind);
            pos += frame_size;  /* handed to the pull handler, as broker/fast_path.py does */
            continue;
        }
        int sends = kind == Py_True;
        Py_DECREF(kind);
        if (!sends)
            goto python_path;
        PyObject *r = PyObject_CallMethod(fast_path, "take", "OnOOLLLOO", buf, pos, born, segment,
                                          seg_pos, 0LL, 1767000000000LL, queue_table, record);
        if (r == NULL)
            die("take raised");  /* it never raises on a peer's bytes */
        Py_ssize_t next = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 0));
        long long end = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 1));
        long stop = PyLong_AsLong(PyTuple_GET_ITEM(r, 3));
        Py_DECREF(r);
        if (next < pos || next > (Py_ssize_t)size || end < seg_pos || end > SEGMENT_SIZE - BLANK_ROOM)
            abort();  /* positions only move forward, inside their buffers */
        pos = next;
        seg_pos = end;
        if (stop == 2) {  /* segment full: start over, as a new segment would */
            seg_pos = 0;
            fill_queue_table();
            continue;
        }
        if (stop == 0)
            break;
    python_path:
        if (size - (size_t)pos < 4)
            break;
        int32_t total = (int32_t)((uint32_t)data[pos] << 24 | (uint32_t)data[pos + 1] << 16 |
                                  (uint32_t)data[pos + 2] << 8 | data[pos + 3]);
        if (total < 4 || (size_t)total > size - (size_t)pos - 4)
            break;  /* the Python decoder would close the connection here */
        pos += 4 + total;  /* the Python path's frame */
    }
    Py_DECREF(buf);
}

static void call_quietly(PyObject *result)
{
    if (result == NULL) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError) || PyErr_ExceptionMatches(PyExc_SystemError))
            die("unexpected error");
        PyErr_Clear();  /* a refusal: an expected outcome */
    }
    Py_XDECREF(result);
}

/* The signature check of one frame, then the pair set and the user snapshot changed. */
static void fuzz_auth(PyObject *bytes, const uint8_t *data, size_t size)
{
    PyObject *verdict = PyObject_CallMethod(signed_path, "auth_check", "O", bytes);
    if (verdict == NULL)
        die("auth_check raised");  /* a verdict for any bytes */
    long v = PyLong_AsLong(verdict);
    Py_DECREF(verdict);
    if (v < 0 || v > 8)
        abort();
    size_t half = size / 2;
    PyObject *user = PyUnicode_DecodeUTF8((const char *)data, (Py_ssize_t)half, "replace");
    PyObject *topic = PyUnicode_DecodeUTF8((const char *)data + half, (Py_ssize_t)(size - half),
                                           "replace");
    if (user == NULL || topic == NULL)
        die("text");
    call_quietly(PyObject_CallMethod(signed_path, "allow", "iOO", 1, user, topic));
    call_quietly(PyObject_CallMethod(signed_path, "allow", "iOO", 2, user, topic));
    Py_DECREF(user);
    Py_DECREF(topic);
    if (size % 7 == 0) {  /* now and then the snapshot again: the pairs emptied, alice's back */
        PyObject *kept = PyObject_CallMethod(signed_path, "set_users", "iO", 1, users);
        PyObject *back = PyObject_CallMethod(signed_path, "allow", "iss", 1, "alice", "FastPlain");
        if (kept == NULL || back == NULL)
            die("set_users");
        Py_DECREF(kept);
        Py_DECREF(back);
    }
}

/* The SHA-NI and the FIPS rounds of HMAC-SHA1 give the same digest. */
static void fuzz_hmac(const uint8_t *data, size_t size)
{
    size_t key_len = size ? data[0] : 0;
    if (key_len > size - (size ? 1 : 0))
        key_len = size ? size - 1 : 0;
    PyObject *key = PyBytes_FromStringAndSize((const char *)data + (size ? 1 : 0),
                                              (Py_ssize_t)key_len);
    PyObject *text = PyBytes_FromStringAndSize((const char *)data + (size ? 1 : 0) + key_len,
                                               (Py_ssize_t)(size - (size ? 1 : 0) - key_len));
    PyObject *fast = PyObject_CallMethod(protocol, "hmac_sha1", "OOi", key, text, 0);
    PyObject *fips = PyObject_CallMethod(protocol, "hmac_sha1", "OOi", key, text, 1);
    if (fast == NULL || fips == NULL || PyObject_RichCompareBool(fast, fips, Py_EQ) != 1)
        die("hmac_sha1: the two block functions differ");
    Py_DECREF(key);
    Py_DECREF(text);
    Py_DECREF(fast);
    Py_DECREF(fips);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] & 15;
    data++;
    size--;
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    if (bytes == NULL)
        die("bytes");
    switch (which) {
    case 4:
        call_quietly(PyObject_CallMethod(protocol, "encode_wire_single", "OOiOiiLOOi", bytes,
                                         bytes, 0, topic_part, 1, 0, 1LL, born, store_host, 0));
        break;
    case 5:
        call_quietly(PyObject_CallMethod(protocol, "encode_wire_batch", "OOiiLOOinn", bytes,
                                         topic_part, 0, 0, 1LL, born, store_host, 0,
                                         (Py_ssize_t)4096, (Py_ssize_t)65536));
        call_quietly(PyObject_CallMethod(protocol, "check_wire_batch", "OOiiLOOinn", bytes,
                                         topic_part, 0, 0, 1LL, born, store_host, 0,
                                         (Py_ssize_t)4096, (Py_ssize_t)65536));
        break;
    case 6:
        call_quietly(PyObject_CallMethod(protocol, "scan_stored", "Onnn", bytes, (Py_ssize_t)0,
                                         (Py_ssize_t)size, (Py_ssize_t)64));
        call_quietly(PyObject_CallMethod(store, "queue_runs", "OnLL", bytes, (Py_ssize_t)64,
                                         1LL << 20, -1LL));
        call_quietly(PyObject_CallMethod(store, "queue_runs", "OnLL", bytes, (Py_ssize_t)8,
                                         4096LL, (long long)size * 64));
        call_quietly(PyObject_CallMethod(store, "queue_runs", "OnLLO", bytes, (Py_ssize_t)64,
                                         1LL << 20, -1LL, tag_codes));
        call_quietly(PyObject_CallMethod(store, "runs_tags_in", "OLO", bytes, 0LL, tag_names));
        break;
    case 7: {
        PyObject *text = PyUnicode_DecodeUTF8((const char *)data, (Py_ssize_t)size, "replace");
        if (text == NULL)
            die("text");
        call_quietly(PyObject_CallMethod(protocol, "java_string_hash", "O", text));
        call_quietly(PyObject_CallMethod(store, "index_key_hash", "OO", text, text));
        Py_DECREF(text);
        break;
    }
    case 8: case 9:
        fuzz_take(signed_path, data, size, Py_None);
        break;
    case 10: case 11:
        reset_session(which == 11);
        fuzz_take(stateful_path, data, size, session);
        break;
    case 12:
        fuzz_auth(bytes, data, size);
        break;
    case 13:
        fuzz_hmac(data, size);
        break;
    case 14:
    case 15: {
        PyObject *r = PyObject_CallMethod(twins, which == 14 ? "store" : "columns", "O", bytes);
        if (r == NULL)
            die(which == 14 ? "fuzz_twins.store: the store's C and Python disagree (or raised)"
                            : "fuzz_twins.columns: the columns' C and Python disagree (or raised)");
        Py_DECREF(r);
        break;
    }
    default:
        fuzz_take(fast_path, data, size, Py_None);
    }
    Py_DECREF(bytes);
    return 0;
}
