/*
 * fastpath_answer.c: the answer to a send the fast path stored (see fastpath_answer.h).
 */
#include <stdio.h>

#include "broker/_native/fastpath_answer.h"

const char HEX_UPPER[] = "0123456789ABCDEF";

/* The offset message id of the message at ``phy`` into ``w``; returns its length. */
static Py_ssize_t write_msg_id(const FastPathObject *fp, char *w, int64_t phy)
{
    memcpy(w, fp->id_prefix, (size_t)fp->id_prefix_len);
    w += fp->id_prefix_len;
    for (int shift = 60; shift >= 0; shift -= 4)
        *w++ = HEX_UPPER[((uint64_t)phy >> shift) & 0xF];
    return fp->id_prefix_len + 16;
}

/* The msgId value of a send of ``count`` messages stored at ``m`` (offset ``phy``). */
static Py_ssize_t write_msg_ids(const FastPathObject *fp, char *w, const unsigned char *m,
                                int64_t phy, Py_ssize_t count)
{
    Py_ssize_t len = 0, rel = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i > 0)
            w[len++] = ',';
        len += write_msg_id(fp, w + len, phy + rel);
        rel += get_i32(m + rel + TOTALSIZE_AT);
    }
    return len;
}

/* The JSON header of the answer at ``w``; returns its length. */
static Py_ssize_t json_answer(const FastPathObject *fp, char *w, const WireRequest *r,
                              const unsigned char *m, int64_t phy, Py_ssize_t count,
                              int32_t queue_id, int64_t queue_offset)
{
    Py_ssize_t n = 0;
    n += sprintf(w + n, "{\"code\":0,\"language\":\"PYTHON\",\"version\":%d,\"opaque\":%d,"
                        "\"flag\":1,\"extFields\":{\"msgId\":\"", (int)r->version, (int)r->opaque);
    n += write_msg_ids(fp, w + n, m, phy, count);
    n += sprintf(w + n, "\",\"queueId\":\"%d\",\"queueOffset\":\"%lld\"}}", (int)queue_id,
                 (long long)queue_offset);
    return n;
}

/* One binary extFields entry: i16 key length, key, i32 value length, value. */
static Py_ssize_t binary_field(char *w, const char *key, const char *value, Py_ssize_t value_len)
{
    Py_ssize_t key_len = (Py_ssize_t)strlen(key);
    w[0] = 0;
    w[1] = (char)key_len;
    memcpy(w + 2, key, (size_t)key_len);
    put_i32((unsigned char *)w + 2 + key_len, (int32_t)value_len);
    memcpy(w + 6 + key_len, value, (size_t)value_len);
    return 6 + key_len + value_len;
}

/* The binary header of the answer at ``w`` (``ids``: its msgId, written first); its length. */
static Py_ssize_t binary_answer(char *w, const WireRequest *r, const char *ids,
                                Py_ssize_t ids_len, int32_t queue_id, int64_t queue_offset)
{
    char number[32];
    unsigned char *u = (unsigned char *)w;
    u[0] = 0;
    u[1] = 0;  /* code SUCCESS */
    u[2] = LANGUAGE_PYTHON;
    u[3] = (unsigned char)((uint16_t)r->version >> 8);
    u[4] = (unsigned char)r->version;
    put_i32(u + 5, r->opaque);
    put_i32(u + 9, FLAG_RESPONSE);
    put_i32(u + 13, 0);  /* no remark */
    Py_ssize_t n = BIN_FIXED + 4;
    n += binary_field(w + n, "msgId", ids, ids_len);
    n += binary_field(w + n, "queueId", number, sprintf(number, "%d", (int)queue_id));
    n += binary_field(w + n, "queueOffset", number, sprintf(number, "%lld", (long long)queue_offset));
    put_i32(u + BIN_FIXED, (int32_t)(n - BIN_FIXED - 4));
    return n;
}

/* Room for the answer to a send of ``count`` messages; -1 with an exception set. */
int reserve_answer(Take *t, Py_ssize_t count)
{
    return out_reserve(t, 2 * count * (MSG_ID_MAX + 1) + 256);
}

/* Appends the answer to a send of ``count`` messages stored at ``m`` to the output (its room
 * reserved by reserve_answer). */
void answer_send(const FastPathObject *fp, Take *t, const WireRequest *r,
                        const unsigned char *m, int64_t phy, Py_ssize_t count, int32_t queue_id,
                        int64_t queue_offset)
{
    Py_ssize_t ids_max = count * (MSG_ID_MAX + 1);
    unsigned char *frame = (unsigned char *)t->out + t->out_len;
    char *header = (char *)frame + 8;
    Py_ssize_t header_len;
    if (r->serialize_type == SERIALIZE_JSON) {
        header_len = json_answer(fp, header, r, m, phy, count, queue_id, queue_offset);
    } else {
        char *ids = header + ids_max + 128;  /* past the header's room, inside the reserve */
        Py_ssize_t ids_len = write_msg_ids(fp, ids, m, phy, count);
        header_len = binary_answer(header, r, ids, ids_len, queue_id, queue_offset);
    }
    put_i32(frame, (int32_t)(4 + header_len));
    put_i32(frame + 4, (int32_t)(((uint32_t)r->serialize_type << 24) | (uint32_t)header_len));
    t->out_len += 8 + header_len;
}

