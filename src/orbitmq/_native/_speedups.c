/*
 * orbitmq._native._speedups: OrbitMQ's per-message byte work in C, one extension module built
 * from this file and the C sources of three rooms (hatch_build.py lists them), each beside the
 * Python it twins:
 *
 *   protocol/_native/  the stored codec's C twins, the column encoder, Java's hashes, CRC-32,
 *                      HMAC-SHA1 (sans-I/O, like the protocol)
 *   store/_native/     dispatch's plan, IndexFile.put_hash over planned entries, a queue's runs
 *   broker/_native/    FastPath: the native fast path of plain sends, its answers, its check of
 *                      signed sends, the wire-request reader
 *
 * Each room's functions live in a submodule of their own (orbitmq._native._speedups.protocol,
 * .store, .broker), which the room's loader exposes as its NATIVE (orbitmq/<room>/native.py,
 * typed by native.pyi): no room reaches another's entry points through Python. One module, so the
 * C calls from the store and the broker into the protocol's encoder and rules stay direct calls.
 *
 * Optional: the build hook compiles it when a C compiler is present; without it, or with
 * ORBITMQ_PURE_PYTHON=1, OrbitMQ runs the Python twins.
 */
#include "broker/_native/entry_points.h"
#include "protocol/_native/entry_points.h"
#include "store/_native/entry_points.h"

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "orbitmq._native._speedups",
    "OrbitMQ's per-message byte work in C (optional): submodules protocol, store, broker.",
    -1, NULL,
};

/* The submodule ``name`` of ``parent`` filled by ``init``; -1 with an exception set. */
static int add_room(PyObject *parent, const char *name, int (*init)(PyObject *))
{
    PyObject *room = PyModule_New(name);
    if (room == NULL)
        return -1;
    const char *short_name = strrchr(name, '.') + 1;
    if (init(room) < 0 || PyModule_AddObjectRef(parent, short_name, room) < 0) {
        Py_DECREF(room);
        return -1;
    }
    Py_DECREF(room);
    return 0;
}

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* The protocol first: it sets up what every room uses (CRC-32, SHA-1, the error type). */
    if (add_room(m, "orbitmq._native._speedups.protocol", protocol_room_init) < 0 ||
        add_room(m, "orbitmq._native._speedups.store", store_room_init) < 0 ||
        add_room(m, "orbitmq._native._speedups.broker", broker_room_init) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
