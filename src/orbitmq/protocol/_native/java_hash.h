/*
 * java_hash.h: Java's String.hashCode, the twin of orbitmq/protocol/java_hash.py: over a str's
 * UTF-16 code units, or over valid UTF-8 bytes (the units they decode to), 32-bit wraparound.
 */
#ifndef ORBITMQ_PROTOCOL_JAVA_HASH_H
#define ORBITMQ_PROTOCOL_JAVA_HASH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* h * 31^n + (the UTF-16 units of the str s) */
uint32_t java_hash_continue(uint32_t h, PyObject *s);
/* String.hashCode of a str */
int32_t java_hash_unicode(PyObject *s);
/* h * 31^n + (the UTF-16 units of ``s[0:n]``, which is valid UTF-8: checked before) */
uint32_t java_hash_utf8(uint32_t h, const unsigned char *s, Py_ssize_t n);

#endif
