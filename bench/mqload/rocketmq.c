/*
 * mqload -sys rocketmq: RocketMQ 4.x remoting over TCP, JSON headers, as OrbitMQ's clients speak.
 *
 * pub: SEND_MESSAGE_V2 (310) with headers a..m, or with -batch K > 1 SEND_BATCH_MESSAGE (320)
 * carrying K messages in RocketMQ's batch encoding; a UNIQ_KEY property per message; queue ids
 * round-robin over -queues (sent as the default queue count, so that an auto-created topic gets
 * that many). With -ak/-sk each request carries AccessKey and a Signature: Base64 HMAC-SHA1 (the
 * broker's own src/orbitmq/protocol/_native/hmac_sha1.c) of the extFields' values sorted by key,
 * then the body. A message counts when its request is answered with code 0.
 * sub: PULL_MESSAGE (11) from offset 0 on every queue of -q (one pull in flight per queue, all on
 * one connection, -b messages at most, long polling 1 s), following nextBeginOffset, until -n
 * messages arrived; each stored message is counted by its TOTALSIZE, its MAGICCODE checked. No
 * offsets are committed (the group reads from 0 every time).
 * e2e: first one unstamped message to each of -queues queues (it creates the topic), then the
 * consumer's connection asks each queue's max offset (GET_MAX_OFFSET, 30) and pulls from there as
 * a push consumer does: PULL_MESSAGE with sysFlag FLAG_SUSPEND (2) and suspendTimeoutMillis
 * E2E_SUSPEND_MS (the push consumer's brokerSuspendMaxTimeMillis), one held pull per queue, the
 * next sent as soon as one is answered; each stored message's body is read for its stamp. The
 * producer, on its own connection, writes the messages due (SEND_MESSAGE_V2, queues round-robin,
 * at most -w unanswered) and reads answers until the next is due.
 */
#define _GNU_SOURCE
#include "mqload.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/orbitmq/protocol/_native/hmac_sha1.h"

#define CODE_PULL 11
#define CODE_GET_MAX_OFFSET 30
#define CODE_SEND_V2 310
#define CODE_SEND_BATCH 320
#define CODE_PULL_NOT_FOUND 19
#define CODE_PULL_RETRY 20
#define CODE_PULL_MOVED 21
#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define SUSPEND_MS 1000
#define E2E_SUSPEND_MS 15000
#define E2E_ANSWER_MAX_S 10.0 /* after the last send, for the answers still missing */
#define E2E_POLL_NS 100000000LL

static HmacKey key;
static atomic_long uniq_counter;

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static void reserve(Buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return;
    while (b->len + more > b->cap)
        b->cap = b->cap ? 2 * b->cap : 65536;
    b->p = realloc(b->p, b->cap);
    if (b->p == NULL)
        die("realloc");
}

static void put(Buf *b, const void *data, size_t n)
{
    reserve(b, n);
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u32(Buf *b, uint32_t v)
{
    unsigned char x[4] = {v >> 24, v >> 16, v >> 8, v};
    put(b, x, 4);
}

static uint32_t get_u32(const unsigned char *f)
{
    return (uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3];
}

static void put_json_string(Buf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            char e[7];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(b, e, 6);
        } else {
            put(b, &s[i], 1);
        }
    }
    put(b, "\"", 1);
}

/* A frame: length, JSON header length, header {code, opaque, extFields}, body. */
static void put_frame(Buf *out, int code, int opaque, const char **keys, const char **vals,
                      const size_t *lens, int fields, const char *signature, const Buf *body)
{
    Buf h = {0};
    char head[160];
    int n = snprintf(head, sizeof head, "{\"code\":%d,\"language\":\"OTHER\",\"version\":0,"
                     "\"opaque\":%d,\"flag\":0,\"remark\":\"\",\"extFields\":{", code, opaque);
    put(&h, head, (size_t)n);
    for (int i = 0; i < fields; i++) {
        if (i)
            put(&h, ",", 1);
        put_json_string(&h, keys[i], strlen(keys[i]));
        put(&h, ":", 1);
        put_json_string(&h, vals[i], lens[i]);
    }
    if (signature != NULL) {
        put(&h, ",\"AccessKey\":", 13);
        put_json_string(&h, opt.ak, strlen(opt.ak));
        put(&h, ",\"Signature\":", 13);
        put_json_string(&h, signature, SHA1_BASE64);
    }
    put(&h, "}}", 2);
    size_t body_len = body ? body->len : 0;
    put_u32(out, (uint32_t)(4 + h.len + body_len));
    put_u32(out, (uint32_t)h.len); /* serialize type 0: JSON */
    put(out, h.p, h.len);
    if (body_len)
        put(out, body->p, body_len);
    free(h.p);
}

/* A header field's number (quoted or not) after ``name`` (e.g. "\"code\":"), or ``absent``. */
static long json_long(const char *h, size_t n, const char *name, long absent)
{
    char *at = memmem(h, n, name, strlen(name));
    if (at == NULL)
        return absent;
    at += strlen(name);
    if (*at == '"')
        at++;
    return strtol(at, NULL, 10);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            die("write");
        p += w;
        n -= (size_t)w;
    }
}

/* Reads more into ``in``; dies on a closed connection. */
static void read_more(int fd, Buf *in)
{
    reserve(in, 1 << 16);
    ssize_t r = read(fd, in->p + in->len, in->cap - in->len);
    if (r <= 0)
        die("read");
    in->len += (size_t)r;
}

/* The next whole frame in ``in`` at ``*pos``: its header and body; 0 when none is complete. */
static int next_frame(Buf *in, size_t *pos, const char **hdr, uint32_t *hlen,
                      const unsigned char **body, size_t *blen)
{
    if (in->len - *pos < 8)
        return 0;
    const unsigned char *f = (const unsigned char *)in->p + *pos;
    uint32_t total = get_u32(f);
    if (in->len - *pos < 4 + (size_t)total) {
        reserve(in, 4 + (size_t)total); /* a large pull answer: room for all of it */
        return 0;
    }
    *hlen = get_u32(f + 4) & 0xFFFFFF;
    if (*hlen > total - 4)
        fail("malformed frame: header length %u of %u", *hlen, total);
    *hdr = (const char *)f + 8;
    *body = f + 8 + *hlen;
    *blen = total - 4 - *hlen;
    *pos += 4 + (size_t)total;
    return 1;
}

static void consume(Buf *in, size_t pos)
{
    memmove(in->p, in->p + pos, in->len - pos);
    in->len -= pos;
}

/* ------------------------------------------------------------------------------------ pub */
static int uniq_props(char *out, unsigned prefix)
{
    long c = atomic_fetch_add(&uniq_counter, 1);
    return sprintf(out, "UNIQ_KEY\x01%08X%04X%08X%08X%04X\x02", 0x7F000001u,
                   (unsigned)getpid() & 0xFFFF, prefix, (unsigned)(now_ms() & 0xFFFFFFFF),
                   (unsigned)(c & 0xFFFF));
}

static void append_send(Buf *out, Buf *body, int opaque, int qid, long m, unsigned prefix)
{
    char qs[24], dq[24], born[24], props[64];
    int props_len = 0;
    body->len = 0;
    if (opt.batch > 1) {
        for (long j = 0; j < m; j++) {
            char p[64];
            int pl = uniq_props(p, prefix);
            put_u32(body, (uint32_t)(20 + opt.size + 2 + pl)); /* TOTALSIZE */
            put_u32(body, 0);                                   /* MAGICCODE */
            put_u32(body, 0);                                   /* BODYCRC */
            put_u32(body, 0);                                   /* FLAG */
            put_u32(body, (uint32_t)opt.size);
            put(body, payload, (size_t)opt.size);
            unsigned char pl16[2] = {(unsigned char)(pl >> 8), (unsigned char)pl};
            put(body, pl16, 2);
            put(body, p, (size_t)pl);
        }
    } else {
        put(body, payload, (size_t)opt.size);
        props_len = uniq_props(props, prefix);
    }
    snprintf(qs, sizeof qs, "%d", qid);
    snprintf(dq, sizeof dq, "%ld", opt.queues);
    snprintf(born, sizeof born, "%lld", now_ms());
    /* producerGroup, topic, defaultTopic, defaultTopicQueueNums, queueId, sysFlag, bornTimestamp,
     * flag, properties, reconsumeTimes, unitMode, batch: sorted by key, as signing wants */
    const char *keys[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"};
    const char *vals[] = {"mqload", opt.topic, "TBW102", dq, qs, "0", born, "0", props, "0",
                          "false", opt.batch > 1 ? "true" : "false"};
    size_t lens[12];
    for (int i = 0; i < 12; i++)
        lens[i] = i == 8 ? (size_t)props_len : strlen(vals[i]);
    char signature[SHA1_BASE64];
    if (opt.ak != NULL) {
        Sha1 s;
        unsigned char digest[SHA1_DIGEST];
        hmac_sha1_begin(&key, &s);
        sha1_update(&s, (const unsigned char *)opt.ak, strlen(opt.ak));
        for (int i = 0; i < 12; i++)
            sha1_update(&s, (const unsigned char *)vals[i], lens[i]);
        sha1_update(&s, (const unsigned char *)body->p, body->len);
        hmac_sha1_end(&key, &s, digest);
        base64_digest(digest, signature);
    }
    put_frame(out, opt.batch > 1 ? CODE_SEND_BATCH : CODE_SEND_V2, opaque, keys, vals, lens, 12,
              opt.ak != NULL ? signature : NULL, body);
}

typedef struct {
    int id;
    long count;
} Producer;

/* Reads from ``fd`` and takes the send answers that came: each one's latency from
 * ``sent_at[opaque]`` and its messages (``msgs_of[opaque]``, 1 each when NULL) counted when it is
 * SUCCESS, reported otherwise. Returns how many answers were taken. */
static long read_answers(int fd, Buf *in, long sent, const double *sent_at, const long *msgs_of,
                         Lat *lat)
{
    read_more(fd, in);
    size_t pos = 0, blen;
    const char *hdr;
    const unsigned char *b;
    uint32_t hlen;
    long answered = 0;
    while (next_frame(in, &pos, &hdr, &hlen, &b, &blen)) {
        long code = json_long(hdr, hlen, "\"code\":", -1);
        long opaque = json_long(hdr, hlen, "\"opaque\":", -1);
        if (opaque < 0 || opaque >= sent)
            continue;
        long msgs = msgs_of != NULL ? msgs_of[opaque] : 1;
        lat_add(lat, now_s() - sent_at[opaque]);
        if (code == 0)
            atomic_fetch_add(&counted, msgs);
        else
            report_error("send of %ld message(s): code %ld: %.*s", msgs, code,
                         (int)(hlen < 300 ? hlen : 300), hdr);
        answered++;
    }
    consume(in, pos);
    return answered;
}

static void *produce(void *arg)
{
    Producer *pr = arg;
    int fd = tcp_connect(opt.host, opt.port);
    Lat *lat = lat_new();
    long reqs = (pr->count + opt.batch - 1) / opt.batch, sent = 0, answered = 0, msgs_sent = 0;
    long *msgs_of = calloc((size_t)reqs + 1, sizeof(long));
    double *sent_at = calloc((size_t)reqs + 1, sizeof(double));
    if (msgs_of == NULL || sent_at == NULL)
        die("calloc");
    unsigned prefix = (unsigned)rand();
    Buf out = {0}, body = {0}, in = {0};
    int stopped = 0;
    while (answered < sent || (!stopped && sent < reqs)) {
        out.len = 0;
        while (!stopped && sent < reqs && sent - answered < opt.window) {
            if (now_s() > deadline) {
                stopped = 1;
                break;
            }
            long m = pr->count - msgs_sent < opt.batch ? pr->count - msgs_sent : opt.batch;
            append_send(&out, &body, (int)sent, (int)((pr->id + sent) % opt.queues), m, prefix);
            msgs_of[sent] = m;
            sent_at[sent] = now_s();
            msgs_sent += m;
            sent++;
        }
        if (out.len)
            write_all(fd, out.p, out.len);
        if (answered == sent)
            continue;
        answered += read_answers(fd, &in, sent, sent_at, msgs_of, lat);
    }
    close(fd);
    free(out.p);
    free(body.p);
    free(in.p);
    free(msgs_of);
    free(sent_at);
    return NULL;
}

static int publish(void)
{
    Producer *prs = calloc((size_t)opt.procs, sizeof(Producer));
    if (prs == NULL)
        die("calloc");
    for (long i = 0; i < opt.procs; i++) {
        prs[i].id = (int)i;
        prs[i].count = opt.n / opt.procs + (i < opt.n % opt.procs);
    }
    run_threads(produce, prs, sizeof prs[0], opt.procs);
    free(prs);
    return 0;
}

/* ------------------------------------------------------------------------------------ sub */
static void append_pull(Buf *out, long qid, long long offset, long seq, int suspend_ms)
{
    char qs[24], off[24], max[24], suspend[24];
    snprintf(qs, sizeof qs, "%ld", qid);
    snprintf(off, sizeof off, "%lld", offset);
    snprintf(max, sizeof max, "%ld", opt.fetch);
    snprintf(suspend, sizeof suspend, "%d", suspend_ms);
    const char *keys[] = {"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums",
                          "sysFlag", "commitOffset", "suspendTimeoutMillis", "subscription",
                          "subVersion", "expressionType"};
    const char *vals[] = {"mqload", opt.topic, qs, off, max, "2", "0", suspend, "*", "0", "TAG"};
    size_t lens[11];
    for (int i = 0; i < 11; i++)
        lens[i] = strlen(vals[i]);
    put_frame(out, CODE_PULL, (int)(seq * opt.queues + qid), keys, vals, lens, 11, NULL, NULL);
}

/* Stored messages in a pull answer's body, each checked by its TOTALSIZE and MAGICCODE. */
static long count_messages(const unsigned char *b, size_t n)
{
    long count = 0;
    size_t pos = 0;
    while (n - pos >= 8) {
        uint32_t size = get_u32(b + pos), magic = get_u32(b + pos + 4);
        if (size < 8 || size > n - pos || (magic != MAGIC_V1 && magic != MAGIC_V2)) {
            report_error("pull answer: a message of size %u, magic %08X at %zu of %zu", size,
                         magic, pos, n);
            break;
        }
        count++;
        pos += size;
    }
    return count;
}

static int subscribe(void)
{
    int fd = tcp_connect(opt.host, opt.port);
    long long *offsets = calloc((size_t)opt.queues, sizeof(long long));
    char *live = calloc((size_t)opt.queues, 1);
    if (offsets == NULL || live == NULL)
        die("calloc");
    Buf out = {0}, in = {0};
    long seq = 0, pending = opt.queues;
    for (long q = 0; q < opt.queues; q++) {
        live[q] = 1;
        append_pull(&out, q, 0, seq++, SUSPEND_MS);
    }
    write_all(fd, out.p, out.len);
    while (pending > 0 && atomic_load(&counted) < opt.n && now_s() < deadline) {
        read_more(fd, &in);
        size_t pos = 0, blen;
        const char *hdr;
        const unsigned char *b;
        uint32_t hlen;
        out.len = 0;
        while (next_frame(&in, &pos, &hdr, &hlen, &b, &blen)) {
            long code = json_long(hdr, hlen, "\"code\":", -1);
            long opaque = json_long(hdr, hlen, "\"opaque\":", -1);
            if (opaque < 0)
                continue;
            long q = opaque % opt.queues;
            long long next = json_long(hdr, hlen, "\"nextBeginOffset\":", -1);
            if (code == 0) {
                atomic_fetch_add(&counted, count_messages(b, blen));
            } else if (code != CODE_PULL_NOT_FOUND && code != CODE_PULL_RETRY &&
                       code != CODE_PULL_MOVED) {
                report_error("pull of queue %ld: code %ld: %.*s", q, code,
                             (int)(hlen < 300 ? hlen : 300), hdr);
                live[q] = 0;
                pending--;
                continue;
            }
            if (next >= 0)
                offsets[q] = next;
            if (atomic_load(&counted) < opt.n && now_s() < deadline)
                append_pull(&out, q, offsets[q], seq++, SUSPEND_MS);
        }
        consume(&in, pos);
        if (out.len)
            write_all(fd, out.p, out.len);
    }
    close(fd);
    free(offsets);
    free(live);
    free(out.p);
    free(in.p);
    return 0;
}

/* ------------------------------------------------------------------------------------ e2e */
/* Hands the body of each stored message in a pull answer to e2e_record (the layout:
 * src/orbitmq/protocol/stored/__init__.py); returns how many messages there were. */
static long record_bodies(const unsigned char *b, size_t n)
{
    long count = 0;
    size_t pos = 0;
    while (n - pos >= 8) {
        const unsigned char *m = b + pos;
        uint32_t size = get_u32(m), magic = get_u32(m + 4);
        if (size < 88 || size > n - pos || (magic != MAGIC_V1 && magic != MAGIC_V2)) {
            report_error("pull answer: a message of size %u, magic %08X at %zu of %zu", size,
                         magic, pos, n);
            break;
        }
        uint32_t sys_flag = get_u32(m + 36);
        size_t stored_at = 36 + 4 + 8 + (sys_flag & 16 ? 20 : 8); /* STORETIMESTAMP, ms */
        size_t at = stored_at + 8 + (sys_flag & 32 ? 20 : 8) + 4 + 8;
        uint32_t body_len = at + 4 <= size ? get_u32(m + at) : 0;
        if (at + 4 + (size_t)body_len > size) {
            report_error("pull answer: a body of %u bytes in a message of %u", body_len, size);
        } else {
            long long stored_ms = (long long)((uint64_t)get_u32(m + stored_at) << 32 |
                                              get_u32(m + stored_at + 4));
            /* the middle of its millisecond (e2e.c) */
            e2e_record(m + at + 4, body_len, stored_ms * 1000000 + 500000);
        }
        count++;
        pos += size;
    }
    return count;
}

/* Writes ``out`` and reads the ``count`` answers it asked for (opaque 0..count-1), each of
 * which must be code 0; the header field ``field`` of each, by opaque, into ``values``. */
static void exchange(int fd, Buf *out, long count, const char *field, long long *values)
{
    write_all(fd, out->p, out->len);
    out->len = 0;
    Buf in = {0};
    long answered = 0;
    while (answered < count) {
        read_more(fd, &in);
        size_t pos = 0, blen;
        const char *hdr;
        const unsigned char *b;
        uint32_t hlen;
        while (next_frame(&in, &pos, &hdr, &hlen, &b, &blen)) {
            long code = json_long(hdr, hlen, "\"code\":", -1);
            long opaque = json_long(hdr, hlen, "\"opaque\":", -1);
            if (code != 0)
                fail("-mode e2e: setting up: code %ld: %.*s", code, (int)(hlen < 300 ? hlen : 300),
                     hdr);
            if (values != NULL && opaque >= 0 && opaque < count)
                values[opaque] = json_long(hdr, hlen, field, -1);
            answered++;
        }
        consume(&in, pos);
    }
    free(in.p);
}

typedef struct {
    int fd;
    long long *offsets;
} E2eConsumer;

static void *e2e_consume(void *arg)
{
    E2eConsumer *c = arg;
    Buf out = {0}, in = {0};
    long seq = 0;
    for (long q = 0; q < opt.queues; q++)
        append_pull(&out, q, c->offsets[q], seq++, E2E_SUSPEND_MS);
    write_all(c->fd, out.p, out.len);
    e2e_set_ready();
    while (e2e_consuming()) {
        if (!e2e_wait(c->fd, now_ns() + E2E_POLL_NS))
            continue;
        read_more(c->fd, &in);
        size_t pos = 0, blen;
        const char *hdr;
        const unsigned char *b;
        uint32_t hlen;
        out.len = 0;
        while (next_frame(&in, &pos, &hdr, &hlen, &b, &blen)) {
            long code = json_long(hdr, hlen, "\"code\":", -1);
            long opaque = json_long(hdr, hlen, "\"opaque\":", -1);
            if (opaque < 0)
                continue;
            long q = opaque % opt.queues;
            if (code == 0) {
                record_bodies(b, blen);
            } else if (code != CODE_PULL_NOT_FOUND && code != CODE_PULL_RETRY &&
                       code != CODE_PULL_MOVED) {
                report_error("pull of queue %ld: code %ld: %.*s", q, code,
                             (int)(hlen < 300 ? hlen : 300), hdr);
                continue; /* that queue is read no more */
            }
            long long next = json_long(hdr, hlen, "\"nextBeginOffset\":", -1);
            if (next >= 0)
                c->offsets[q] = next;
            append_pull(&out, q, c->offsets[q], seq++, E2E_SUSPEND_MS);
        }
        consume(&in, pos);
        if (out.len)
            write_all(c->fd, out.p, out.len);
    }
    free(out.p);
    free(in.p);
    return NULL;
}

/* Sends opt.n messages at opt.rate on ``fd``; returns how many were sent. */
static long e2e_produce(int fd, unsigned prefix)
{
    Lat *lat = lat_new();
    double *sent_at = calloc((size_t)opt.n, sizeof(double));
    if (sent_at == NULL)
        die("calloc");
    Buf out = {0}, body = {0}, in = {0};
    long sent = 0, answered = 0;
    e2e_begin();
    for (;;) {
        long long t = now_ns();
        out.len = 0;
        while (sent < opt.n && sent - answered < opt.window && e2e_due_ns(sent) <= t &&
               now_s() <= deadline) {
            e2e_stamp(payload, sent); /* the only thread that reads payload in this mode */
            append_send(&out, &body, (int)sent, (int)(sent % opt.queues), 1, prefix);
            sent_at[sent++] = now_s();
        }
        if (out.len)
            write_all(fd, out.p, out.len);
        int stopped = sent >= opt.n || now_s() > deadline;
        if (stopped && answered == sent)
            break;
        if (stopped && now_s() > deadline + E2E_ANSWER_MAX_S) {
            report_error("-mode e2e: %ld sends unanswered after %.0f s", sent - answered,
                         E2E_ANSWER_MAX_S);
            break;
        }
        long long until = stopped || sent - answered >= opt.window ? now_ns() + E2E_POLL_NS
                                                                   : e2e_due_ns(sent);
        if (!e2e_wait(fd, until))
            continue;
        answered += read_answers(fd, &in, sent, sent_at, NULL, lat);
    }
    free(out.p);
    free(body.p);
    free(in.p);
    free(sent_at);
    return sent;
}

static int end_to_end(void)
{
    int pfd = tcp_connect(opt.host, opt.port), cfd = tcp_connect(opt.host, opt.port);
    unsigned prefix = (unsigned)rand();
    Buf out = {0}, body = {0};
    /* One unstamped message a queue: the topic exists, with -queues queues, before any read. */
    for (long q = 0; q < opt.queues; q++)
        append_send(&out, &body, (int)q, (int)q, 1, prefix);
    exchange(pfd, &out, opt.queues, NULL, NULL);
    long long *offsets = calloc((size_t)opt.queues, sizeof(long long));
    if (offsets == NULL)
        die("calloc");
    for (long q = 0; q < opt.queues; q++) {
        char qs[24];
        snprintf(qs, sizeof qs, "%ld", q);
        const char *keys[] = {"topic", "queueId"};
        const char *vals[] = {opt.topic, qs};
        size_t lens[] = {strlen(opt.topic), strlen(qs)};
        put_frame(&out, CODE_GET_MAX_OFFSET, (int)q, keys, vals, lens, 2, NULL, NULL);
    }
    exchange(cfd, &out, opt.queues, "\"offset\":", offsets);
    E2eConsumer consumer = {cfd, offsets};
    pthread_t thread;
    if (pthread_create(&thread, NULL, e2e_consume, &consumer) != 0)
        die("pthread_create");
    e2e_await_ready();
    e2e_produced(e2e_produce(pfd, prefix));
    pthread_join(thread, NULL);
    close(pfd);
    close(cfd);
    free(offsets);
    free(out.p);
    free(body.p);
    return 0;
}

int rocketmq_run(void)
{
    sha1_pick();
    if (opt.sk != NULL)
        hmac_sha1_key(&key, (const unsigned char *)opt.sk, strlen(opt.sk));
    if (!strcmp(opt.mode, "pub"))
        return publish();
    if (!strcmp(opt.mode, "sub"))
        return subscribe();
    if (!strcmp(opt.mode, "e2e"))
        return end_to_end();
    fail("-sys rocketmq: -mode %s is not for it (a topic is created by its first send)", opt.mode);
    return 2;
}
