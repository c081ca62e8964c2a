/*
 * pull_request.c: the reader of pull_request.h.
 */
#include "broker/_native/pull_request.h"

#include <assert.h>
#include <string.h>

enum { P_GROUP, P_TOPIC, P_QUEUE_ID, P_QUEUE_OFFSET, P_MAX_NUMS, P_SYS_FLAG, P_COMMIT,
       P_SUSPEND, P_SUBSCRIPTION, P_SUB_VERSION, P_EXPRESSION_TYPE, P_MAX_BYTES, P_NAMES };

static const char *const PULL_NAMES[P_NAMES] = {
    "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
    "suspendTimeoutMillis", "subscription", "subVersion", "expressionType", "maxMsgBytes",
};
#define P_REQUIRED 8  /* the names before P_SUBSCRIPTION */

static int name_index(Span key)
{
    for (int i = 0; i < P_NAMES; i++) {
        size_t n = strlen(PULL_NAMES[i]);
        if ((size_t)key.len == n && memcmp(key.p, PULL_NAMES[i], n) == 0)
            return i;
    }
    return -1;
}

/* "" reads as absent (pull_fast: ``get(name) or None``). */
static Span text_or_absent(Span s)
{
    if (s.p != NULL && s.len == 0)
        s.p = NULL;
    return s;
}

int pull_fields(const WireRequest *r, PullFields *f)
{
    if (r->code != CODE_PULL_MESSAGE || (r->flag & (FLAG_RESPONSE | FLAG_ONEWAY)) ||
        r->body_len != 0 || r->ext_overflow)
        return 0;
    Span v[P_NAMES];
    memset(v, 0, sizeof v);
    for (int i = 0; i < r->ext_count; i++) {
        int at = name_index(r->ext_key[i]);
        if (at < 0)
            continue;
        if (v[at].p != NULL)
            return 0;  /* given twice: which one counts is the Python decoder's call */
        v[at] = r->ext_value[i];
        assert(v[at].p != NULL);  /* a value points into the header or scratch, even when empty */
    }
    for (int i = 0; i < P_REQUIRED; i++)
        if (v[i].p == NULL)
            return 0;
    if (!span_int(v[P_QUEUE_ID], 0, INT32_MAX, &f->queue_id) ||
        !span_int(v[P_QUEUE_OFFSET], INT64_MIN, INT64_MAX, &f->queue_offset) ||
        !span_int(v[P_MAX_NUMS], 1, INT32_MAX, &f->max_msg_nums) ||
        !span_int(v[P_SYS_FLAG], 0, PULL_SYS_FLAG_MASK, &f->sys_flag) ||
        !span_int(v[P_COMMIT], -1, INT64_MAX, &f->commit_offset) ||
        !span_int(v[P_SUSPEND], 0, INT64_MAX, &f->suspend_ms) ||
        !span_opt_int(v[P_SUB_VERSION], 0, INT64_MIN, INT64_MAX, &f->sub_version) ||
        !span_opt_int(v[P_MAX_BYTES], 0, 1, INT32_MAX, &f->max_msg_bytes))
        return 0;
    f->group = v[P_GROUP];
    f->topic = v[P_TOPIC];
    f->subscription = text_or_absent(v[P_SUBSCRIPTION]);
    f->expression_type = text_or_absent(v[P_EXPRESSION_TYPE]);
    return 1;
}
