/*
 * entry_points.h: the broker room's part of the module's init (entry_points.c).
 */
#ifndef ORBITMQ_BROKER_ENTRY_POINTS_H
#define ORBITMQ_BROKER_ENTRY_POINTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Fills the room's module object (orbitmq._native._speedups.broker): FastPath and its stop reasons.
 * -1 with an exception set. */
int broker_room_init(PyObject *room);

#endif
