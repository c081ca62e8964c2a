/*
 * mqload -sys redis: a Redis stream (key -q, default "bench") through hiredis.
 * pub: XADD KEY * d PAYLOAD, pipelined up to -w per connection; a message counts on its reply.
 * sub: XREADGROUP GROUP g c COUNT -b STREAMS KEY > then XACK for each entry, pipelined; the group
 * must exist (run_bench.py creates it with XGROUP CREATE KEY g 0).
 * e2e: the consumer's connection makes group e2e start at the stream's end (XGROUP CREATE KEY
 * e2e $ MKSTREAM, or XGROUP SETID when it exists), then loops on XREADGROUP GROUP e2e c COUNT -b
 * BLOCK E2E_BLOCK_MS STREAMS KEY >, the XACK of what the last one read pipelined before it. The
 * producer's connection writes the XADDs due and reads replies until the next is due.
 */
#include "mqload.h"

#ifdef WITH_REDIS
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E2E_BLOCK_MS 100
#define E2E_ANSWER_MAX_S 10.0
#define E2E_POLL_NS 100000000LL
#define ID_MAX 64

static redisContext *connect_redis(void)
{
    redisContext *c = redisConnect(opt.host, atoi(opt.port));
    if (c == NULL || c->err)
        fail("redis %s:%s: %s", opt.host, opt.port, c ? c->errstr : "out of memory");
    return c;
}

static void *produce(void *arg)
{
    long count = *(long *)arg, sent = 0, answered = 0;
    redisContext *c = connect_redis();
    Lat *lat = lat_new();
    double *sent_at = calloc((size_t)opt.window, sizeof(double));
    if (sent_at == NULL)
        die("calloc");
    while (answered < sent || (sent < count && now_s() < deadline)) {
        while (sent < count && sent - answered < opt.window && now_s() < deadline) {
            redisAppendCommand(c, "XADD %s * d %b", opt.topic, payload, (size_t)opt.size);
            sent_at[sent % opt.window] = now_s();
            sent++;
        }
        if (answered == sent)
            break;
        redisReply *r;
        if (redisGetReply(c, (void **)&r) != REDIS_OK)
            fail("redis: %s", c->errstr);
        lat_add(lat, now_s() - sent_at[answered % opt.window]);
        if (r->type == REDIS_REPLY_ERROR)
            report_error("XADD: %s", r->str);
        else
            atomic_fetch_add(&counted, 1);
        freeReplyObject(r);
        answered++;
    }
    free(sent_at);
    redisFree(c);
    return NULL;
}

static int publish(void)
{
    long counts[64];
    for (long i = 0; i < opt.procs; i++)
        counts[i] = opt.n / opt.procs + (i < opt.n % opt.procs);
    run_threads(produce, counts, sizeof counts[0], opt.procs);
    return 0;
}

static int subscribe(void)
{
    redisContext *c = connect_redis();
    while (atomic_load(&counted) < opt.n && now_s() < deadline) {
        redisReply *r = redisCommand(c, "XREADGROUP GROUP g c COUNT %ld BLOCK 200 STREAMS %s >",
                                     opt.fetch, opt.topic);
        if (r == NULL)
            fail("redis: %s", c->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            report_error("XREADGROUP: %s", r->str);
            freeReplyObject(r);
            return 1;
        }
        long acks = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
            redisReply *entries = r->element[0]->element[1];
            for (size_t i = 0; i < entries->elements; i++) {
                redisReply *id = entries->element[i]->element[0];
                redisAppendCommand(c, "XACK %s g %b", opt.topic, id->str, id->len);
                acks++;
            }
        }
        freeReplyObject(r);
        for (long i = 0; i < acks; i++) {
            redisReply *a;
            if (redisGetReply(c, (void **)&a) != REDIS_OK)
                fail("redis: %s", c->errstr);
            if (a->type == REDIS_REPLY_ERROR)
                report_error("XACK: %s", a->str);
            freeReplyObject(a);
        }
        atomic_fetch_add(&counted, acks);
    }
    redisFree(c);
    return 0;
}

/* ------------------------------------------------------------------------------------ e2e */
static redisReply *command_ok(redisContext *c, redisReply *r, const char *what)
{
    if (r == NULL)
        fail("redis: %s", c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        fail("redis %s: %s", what, r->str);
    return r;
}

static redisReply *next_reply(redisContext *c)
{
    redisReply *r;
    if (redisGetReply(c, (void **)&r) != REDIS_OK)
        fail("redis: %s", c->errstr);
    return r;
}

/* Records each entry's d field of an XREADGROUP reply; their ids into ids[], how many back. */
static long record_entries(redisReply *r, char (*ids)[ID_MAX], size_t *id_lens)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return 0;
    redisReply *entries = r->element[0]->element[1];
    long n = 0;
    for (size_t i = 0; i < entries->elements && n < opt.fetch; i++) {
        redisReply *id = entries->element[i]->element[0], *fields = entries->element[i]->element[1];
        if (fields != NULL && fields->type == REDIS_REPLY_ARRAY && fields->elements >= 2) {
            /* An entry id is the server's wall-clock ms at XADD, then a sequence number. */
            long long stored_ms = id->type == REDIS_REPLY_STRING ? atoll(id->str) : 0;
            e2e_record(fields->element[1]->str, fields->element[1]->len,
                       stored_ms > 0 ? stored_ms * 1000000 + 500000 : -1);
        }
        if (id->len >= ID_MAX)
            fail("redis: an entry id of %zu bytes", id->len);
        memcpy(ids[n], id->str, id->len);
        id_lens[n++] = id->len;
    }
    return n;
}

static void *e2e_consume(void *arg)
{
    redisContext *c = arg;
    char (*ids)[ID_MAX] = calloc((size_t)opt.fetch, ID_MAX);
    size_t *id_lens = calloc((size_t)opt.fetch, sizeof(size_t));
    const char **argv = calloc((size_t)opt.fetch + 3, sizeof(char *));
    size_t *argl = calloc((size_t)opt.fetch + 3, sizeof(size_t));
    if (ids == NULL || id_lens == NULL || argv == NULL || argl == NULL)
        die("calloc");
    argv[0] = "XACK", argv[1] = opt.topic, argv[2] = "e2e";
    argl[0] = 4, argl[1] = strlen(opt.topic), argl[2] = 3;
    long acks = 0;
    int first = 1;
    while (e2e_consuming()) {
        if (acks > 0) {
            for (long i = 0; i < acks; i++)
                argv[3 + i] = ids[i], argl[3 + i] = id_lens[i];
            redisAppendCommandArgv(c, (int)(3 + acks), argv, argl);
        }
        redisAppendCommand(c, "XREADGROUP GROUP e2e c COUNT %ld BLOCK %d STREAMS %s >",
                           opt.fetch, E2E_BLOCK_MS, opt.topic);
        int done = 0;
        while (!done)
            if (redisBufferWrite(c, &done) == REDIS_ERR)
                fail("redis: %s", c->errstr);
        if (first) {
            e2e_set_ready(); /* its first read is on its way to the server */
            first = 0;
        }
        if (acks > 0)
            freeReplyObject(command_ok(c, next_reply(c), "XACK"));
        redisReply *r = command_ok(c, next_reply(c), "XREADGROUP");
        acks = record_entries(r, ids, id_lens);
        freeReplyObject(r);
    }
    if (acks > 0) {
        for (long i = 0; i < acks; i++)
            argv[3 + i] = ids[i], argl[3 + i] = id_lens[i];
        freeReplyObject(command_ok(c, redisCommandArgv(c, (int)(3 + acks), argv, argl), "XACK"));
    }
    free(ids);
    free(id_lens);
    free(argv);
    free(argl);
    return NULL;
}

/* Sends opt.n XADDs at opt.rate on ``c``; returns how many were sent. */
static long e2e_produce(redisContext *c)
{
    Lat *lat = lat_new();
    double *sent_at = calloc((size_t)opt.n, sizeof(double));
    if (sent_at == NULL)
        die("calloc");
    long sent = 0, answered = 0;
    e2e_begin();
    for (;;) {
        long long t = now_ns();
        long before = sent;
        while (sent < opt.n && sent - answered < opt.window && e2e_due_ns(sent) <= t &&
               now_s() <= deadline) {
            e2e_stamp(payload, sent);
            redisAppendCommand(c, "XADD %s * d %b", opt.topic, payload, (size_t)opt.size);
            sent_at[sent++] = now_s();
        }
        int done = sent == before;
        while (!done)
            if (redisBufferWrite(c, &done) == REDIS_ERR)
                fail("redis: %s", c->errstr);
        int stopped = sent >= opt.n || now_s() > deadline;
        if (stopped && answered == sent)
            break;
        if (stopped && now_s() > deadline + E2E_ANSWER_MAX_S) {
            report_error("-mode e2e: %ld XADDs unanswered after %.0f s", sent - answered,
                         E2E_ANSWER_MAX_S);
            break;
        }
        long long until = stopped || sent - answered >= opt.window ? now_ns() + E2E_POLL_NS
                                                                   : e2e_due_ns(sent);
        if (!e2e_wait(c->fd, until))
            continue;
        if (redisBufferRead(c) != REDIS_OK)
            fail("redis: %s", c->errstr);
        redisReply *r;
        while (answered < sent) {
            if (redisGetReplyFromReader(c, (void **)&r) != REDIS_OK)
                fail("redis: %s", c->errstr);
            if (r == NULL)
                break;
            lat_add(lat, now_s() - sent_at[answered++]);
            if (r->type == REDIS_REPLY_ERROR)
                report_error("XADD: %s", r->str);
            else
                atomic_fetch_add(&counted, 1);
            freeReplyObject(r);
        }
    }
    free(sent_at);
    return sent;
}

static int end_to_end(void)
{
    redisContext *pc = connect_redis(), *cc = connect_redis();
    redisReply *r = redisCommand(cc, "XGROUP CREATE %s e2e $ MKSTREAM", opt.topic);
    if (r != NULL && r->type == REDIS_REPLY_ERROR && strstr(r->str, "BUSYGROUP") != NULL) {
        freeReplyObject(r);
        r = redisCommand(cc, "XGROUP SETID %s e2e $", opt.topic);
    }
    freeReplyObject(command_ok(cc, r, "XGROUP"));
    pthread_t thread;
    if (pthread_create(&thread, NULL, e2e_consume, cc) != 0)
        die("pthread_create");
    e2e_await_ready();
    e2e_produced(e2e_produce(pc));
    pthread_join(thread, NULL);
    redisFree(pc);
    redisFree(cc);
    return 0;
}

int redis_run(void)
{
    if (!strcmp(opt.mode, "pub"))
        return publish();
    if (!strcmp(opt.mode, "sub"))
        return subscribe();
    if (!strcmp(opt.mode, "e2e"))
        return end_to_end();
    fail("-sys redis: -mode %s is not for it (redis-cli DEL / XGROUP CREATE)", opt.mode);
    return 2;
}
#else
int redis_run(void)
{
    fail("built without hiredis (make bench-peers installs libhiredis-dev)");
    return 2;
}
#endif
