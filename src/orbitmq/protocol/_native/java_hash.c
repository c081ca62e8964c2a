/*
 * java_hash.c: Java's String.hashCode (java_hash.h).
 */
#include "protocol/_native/java_hash.h"

/* h * 31^n + (the units of s), over UTF-16 code units with 32-bit wraparound */
uint32_t java_hash_continue(uint32_t h, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x10000) {
            h = h * 31u + (uint32_t)c;
        } else {  /* a surrogate pair, as Java stores it */
            c -= 0x10000;
            h = h * 31u + (uint32_t)(0xD800 + (c >> 10));
            h = h * 31u + (uint32_t)(0xDC00 + (c & 0x3FF));
        }
    }
    return h;
}

int32_t java_hash_unicode(PyObject *s)
{
    return (int32_t)java_hash_continue(0, s);
}

/* Java's String.hashCode continued over the UTF-16 units of valid UTF-8. */
uint32_t java_hash_utf8(uint32_t h, const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t c = s[i];
        if (c < 0x80) {
            i += 1;
        } else if (c < 0xE0) {
            c = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            c = ((c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            i += 3;
        } else {
            c = ((c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            i += 4;
        }
        if (c < 0x10000) {
            h = h * 31u + c;
        } else {
            c -= 0x10000;
            h = h * 31u + (0xD800 + (c >> 10));
            h = h * 31u + (0xDC00 + (c & 0x3FF));
        }
    }
    return h;
}

