/*
 * entry_points.c: the protocol room's part of orbitmq._native._speedups, the module
 * orbitmq.protocol.native loads (its NATIVE; types in protocol/native.pyi): the stored codec's C
 * twins (stored_twins.c, stored_columns.c), the column encoder (column_batch.c), Java's hashes
 * (java_hash.c), zlib's CRC-32 and HMAC-SHA1 (stored_encode.c, hmac_sha1.c) for the tests that
 * compare them with zlib and hashlib.
 */
#include "protocol/_native/entry_points.h"
#include "protocol/_native/hmac_sha1.h"
#include "protocol/_native/java_hash.h"
#include "protocol/_native/stored_encode.h"

static PyObject *py_java_string_hash(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "java_string_hash takes a str");
        return NULL;
    }
    return PyLong_FromLong(java_hash_unicode(arg));
}

/* zlib.crc32 of a buffer, through crc32_of: the body CRC every encoder here stores (exposed so
 * that tests hold each of its paths to zlib's). */
static PyObject *py_crc32(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32_of((const unsigned char *)buf.buf, buf.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong(crc);
}

/* -- HMAC-SHA1 (hmac_sha1.c), for the tests against hashlib ---------------------------------- */

/* hmac_sha1(key, data, fips=False) -> bytes: the digest, by the FIPS rounds when ``fips`` is
 * true, else by the rounds sha1_pick chose (SHA-NI where the CPU has it). */
static PyObject *py_hmac_sha1(PyObject *self, PyObject *args)
{
    Py_buffer key, data;
    int fips = 0;
    if (!PyArg_ParseTuple(args, "y*y*|p", &key, &data, &fips))
        return NULL;
    int chosen = sha1_ni_ok;
    if (fips)
        sha1_ni_ok = 0;
    HmacKey k;
    Sha1 s;
    unsigned char digest[SHA1_DIGEST];
    hmac_sha1_key(&k, key.buf, (size_t)key.len);
    hmac_sha1_begin(&k, &s);
    sha1_update(&s, data.buf, (size_t)data.len);
    hmac_sha1_end(&k, &s, digest);
    sha1_ni_ok = chosen;
    secure_wipe(&k, sizeof k);
    PyBuffer_Release(&key);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, SHA1_DIGEST);
}

static PyMethodDef protocol_methods[] = {
    {"java_string_hash", py_java_string_hash, METH_O, "Java's String.hashCode of a str."},
    {"crc32", py_crc32, METH_O, "zlib.crc32 of a buffer (the stored body CRC's code)."},
    {"encode_wire_batch", py_encode_wire_batch, METH_VARARGS,
     "Stored form of a batch body's messages; None when the broker must act on one."},
    {"check_wire_batch", py_check_wire_batch, METH_VARARGS,
     "encode_wire_batch's checks of a batch body, nothing encoded: (count, without UNIQ_KEY)."},
    {"encode_wire_single", py_encode_wire_single, METH_VARARGS,
     "Stored form of one message from its body and wire properties; None when the broker "
     "must act on them."},
    {"patch_positions", py_patch_positions, METH_VARARGS,
     "Queue offset, physical offset and store time of each message of an appended blob."},
    {"scan_stored", py_scan_stored, METH_VARARGS,
     "What dispatch needs of each stored message in a range."},
    {"stored_columns", py_stored_columns, METH_VARARGS,
     "The messages of a pull body below an offset as Arrow-shaped column buffers."},
    {"encode_batch_columns", py_encode_batch_columns, METH_VARARGS,
     "A SEND_BATCH_MESSAGE body from columns (column_batch.c, protocol/column_batch.py)."},
    {"hmac_sha1", py_hmac_sha1, METH_VARARGS,
     "HMAC-SHA1 digest of data under key (hmac_sha1.c); fips=True: without SHA-NI."},
    {NULL, NULL, 0, NULL},
};

int protocol_room_init(PyObject *room)
{
    crc32_init();
    crc32_pick();
    sha1_pick();
    if (stored_columns_init() < 0)
        return -1;
    PyObject *errors = PyImport_ImportModule("orbitmq.errors");
    if (errors == NULL)
        return -1;
    remote_protocol_error = PyObject_GetAttrString(errors, "RemoteProtocolError");
    Py_DECREF(errors);
    if (remote_protocol_error == NULL)
        return -1;
    if (PyModule_AddFunctions(room, protocol_methods) < 0 ||
        PyModule_AddIntConstant(room, "CRC32_FROM_ZLIB", crc32_zlib != NULL) < 0 ||
        PyModule_AddIntConstant(room, "CRC32_CLMUL", crc32_clmul_ok) < 0 ||
        PyModule_AddIntConstant(room, "SHA1_NI", sha1_ni_ok) < 0)
        return -1;
    return 0;
}
