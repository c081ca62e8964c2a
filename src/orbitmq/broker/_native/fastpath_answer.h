/*
 * fastpath_answer.h: the answer to a send the fast path stored (fastpath_answer.c), for
 * fastpath.c. Byte for byte what the Python path writes for the same send
 * (SendProcessor._response -> RemotingCommand.response -> protocol.command.encode_header): a frame
 * with no body whose header is, in the request's serialize type,
 *
 *   JSON:   {"code":0,"language":"PYTHON","version":V,"opaque":O,"flag":1,
 *            "extFields":{"msgId":"…","queueId":"Q","queueOffset":"N"}}
 *   binary: code 0, language PYTHON, version, opaque, flag 1, no remark, the same three fields
 *
 * msgId is the offset message id of each stored message (store host in hex, then the commit log
 * offset in 16 hex digits), comma-joined for a batch; queueOffset is the first message's.
 * tests/unit/test_fast_path_differential.py compares them with the Python path's.
 */
#ifndef ORBITMQ_BROKER_FASTPATH_ANSWER_H
#define ORBITMQ_BROKER_FASTPATH_ANSWER_H

#include "broker/_native/fastpath.h"

#define MSG_ID_MAX (2 * HOST_V6_SIZE + 16)

extern const char HEX_UPPER[];  /* "0123456789ABCDEF" */

/* Makes room in the output for the answer to a send of ``count`` messages; -1 with an error. */
int reserve_answer(Take *t, Py_ssize_t count);
/* Appends the answer to a send of ``count`` messages stored at ``m`` to the output (its room
 * reserved by reserve_answer). */
void answer_send(const FastPathObject *fp, Take *t, const WireRequest *r, const unsigned char *m,
                 int64_t phy, Py_ssize_t count, int32_t queue_id, int64_t queue_offset);

#endif
