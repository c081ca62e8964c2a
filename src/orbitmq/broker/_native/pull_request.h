/*
 * pull_request.h: a PULL_MESSAGE (11) request's header values, read in C from a frame
 * wire_request.c has read, for the broker's pull intake (broker/fast_path.py hands them to the
 * pull handler as a header it need not decode).
 *
 * It takes a strict subset of what protocol/_fast_headers.pull_fast takes, and gives the same
 * values for it: the eight required names (consumerGroup ... suspendTimeoutMillis) present, every
 * number in plain decimal (span_int) within the range headers.PullMessageRequestHeader gives it,
 * sysFlag with no bit outside PULL_SYS_FLAG_MASK, subVersion and maxMsgBytes optional (absent or
 * empty: 0 and none). A request flagged oneway or response, with a body, with more extFields than
 * EXT_FIELDS_MAX, or with one of these names given twice is declined: the Python decoder decides.
 * Other names are ignored, as pull_fast ignores them. Pure C, no Python object touched.
 */
#ifndef ORBITMQ_BROKER_PULL_REQUEST_H
#define ORBITMQ_BROKER_PULL_REQUEST_H

#include "broker/_native/wire_request.h"

#define CODE_PULL_MESSAGE 11
#define PULL_SYS_FLAG_MASK 0x1F  /* commit offset, suspend, subscription, class filter, lite */

/* The header's values; a text Span's p is NULL when the name is absent (or given empty, for
 * subscription and expressionType: pull_fast's "absent"). */
typedef struct {
    Span group, topic, subscription, expression_type;
    int64_t queue_id, queue_offset, max_msg_nums, sys_flag, commit_offset, suspend_ms;
    int64_t sub_version, max_msg_bytes;  /* max_msg_bytes 0: absent */
} PullFields;

/* 1 with ``f`` filled when ``r`` (a FRAME_READY request) is such a pull, else 0. */
int pull_fields(const WireRequest *r, PullFields *f);

#endif
