/*
 * entry_points.c: the store room's part of orbitmq._native._speedups, the module
 * orbitmq.store.native loads (its NATIVE; types in store/native.pyi): dispatch's plan
 * (dispatch_plan.c, the twin of store/dispatch.py's per-message work), IndexFile.put_hash over
 * planned entries and the index's key hash (index_file.c), the read of a queue as runs, a TAG
 * subscription's too (queue_runs.c).
 */
#include "store/_native/entry_points.h"

static PyMethodDef store_methods[] = {
    {"index_key_hash", (PyCFunction)(void (*)(void))py_index_key_hash, METH_FASTCALL,
     "abs(hashCode(topic + '#' + key)); 0 for Integer.MIN_VALUE."},
    {"dispatch_plan", py_dispatch_plan, METH_VARARGS,
     "A dispatch round's queue runs, delayed messages and index entries (dispatch_plan.c)."},
    {"queue_runs", py_queue_runs, METH_VARARGS,
     "A read of queue entries as runs of the commit log, by tags code too (queue_runs.c)."},
    {"runs_tags_in", py_runs_tags_in, METH_VARARGS,
     "Whether every stored message of a run has one of the given tags (queue_runs.c)."},
    {"index_put", py_index_put, METH_VARARGS,
     "IndexFile.put_hash over planned index entries (index_file.c)."},
    {NULL, NULL, 0, NULL},
};

int store_room_init(PyObject *room)
{
    return PyModule_AddFunctions(room, store_methods);
}
