/*
 * stored_twins.h: what other rooms use of the stored codec's Python faces (stored_twins.c): the
 * scan record of one stored message, which store/_native/dispatch_plan.c gives for the messages
 * it leaves to Python.
 */
#ifndef ORBITMQ_PROTOCOL_STORED_TWINS_H
#define ORBITMQ_PROTOCOL_STORED_TWINS_H

#include "protocol/_native/stored_rules.h"

/* One scan record (see stored.ScanRecord) of the message at ``m``, at ``pos``, read by
 * read_stored into ``r``; NULL with an exception set. */
PyObject *scan_record(const unsigned char *m, Py_ssize_t pos, const StoredRead *r);

#endif
