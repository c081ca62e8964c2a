/*
 * entry_points.c: the broker room's part of orbitmq._native._speedups, the module
 * orbitmq.broker.native loads (its NATIVE; types in broker/native.pyi): FastPath, the native fast
 * path of plain sends (fastpath.c; broker/fast_path.py drives it), and the stop reasons of its
 * take().
 */
#include "broker/_native/entry_points.h"
#include "broker/_native/fastpath.h"

int broker_room_init(PyObject *room)
{
    if (PyType_Ready(&FastPathType) < 0)
        return -1;
    if (PyModule_AddObjectRef(room, "FastPath", (PyObject *)&FastPathType) < 0 ||
        PyModule_AddIntConstant(room, "STOP_PARTIAL", STOP_PARTIAL) < 0 ||
        PyModule_AddIntConstant(room, "STOP_DECLINED", STOP_DECLINED) < 0 ||
        PyModule_AddIntConstant(room, "STOP_SEGMENT_FULL", STOP_SEGMENT_FULL) < 0)
        return -1;
    return 0;
}
