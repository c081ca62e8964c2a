/*
 * entry_points.h: the protocol room's Python-facing functions (defined in the room's .c files)
 * and its part of the module's init (entry_points.c).
 */
#ifndef ORBITMQ_PROTOCOL_ENTRY_POINTS_H
#define ORBITMQ_PROTOCOL_ENTRY_POINTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Fills the room's module object (orbitmq._native._speedups.protocol) and the state every room uses
 * (CRC-32, SHA-1, RemoteProtocolError): first of the three rooms. -1 with an exception set. */
int protocol_room_init(PyObject *room);
/* zlib.decompress kept for stored_columns (stored_columns.c). */
int stored_columns_init(void);

PyObject *py_encode_wire_single(PyObject *self, PyObject *args);
PyObject *py_encode_wire_batch(PyObject *self, PyObject *args);
PyObject *py_check_wire_batch(PyObject *self, PyObject *args);
PyObject *py_patch_positions(PyObject *self, PyObject *args);
PyObject *py_scan_stored(PyObject *self, PyObject *args);
PyObject *py_stored_columns(PyObject *self, PyObject *args);
PyObject *py_encode_batch_columns(PyObject *self, PyObject *args);

#endif
