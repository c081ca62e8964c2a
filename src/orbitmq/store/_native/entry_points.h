/*
 * entry_points.h: the store room's Python-facing functions (dispatch_plan.c, index_file.c,
 * queue_runs.c) and its part of the module's init (entry_points.c).
 */
#ifndef ORBITMQ_STORE_ENTRY_POINTS_H
#define ORBITMQ_STORE_ENTRY_POINTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Fills the room's module object (orbitmq._native._speedups.store). -1 with an exception set. */
int store_room_init(PyObject *room);

PyObject *py_dispatch_plan(PyObject *self, PyObject *args);
PyObject *py_index_put(PyObject *self, PyObject *args);
PyObject *py_index_key_hash(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *py_queue_runs(PyObject *self, PyObject *args);
PyObject *py_runs_tags_in(PyObject *self, PyObject *args);

#endif
