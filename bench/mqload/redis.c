/*
 * mqload -sys redis: a Redis stream (key -q, default "bench") through hiredis.
 * pub: XADD KEY * d PAYLOAD, pipelined up to -w per connection; a message counts on its reply.
 * sub: XREADGROUP GROUP g c COUNT -b STREAMS KEY > then XACK for each entry, pipelined; the group
 * must exist (run_bench.py creates it with XGROUP CREATE KEY g 0).
 */
#include "mqload.h"

#ifdef WITH_REDIS
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

int redis_run(void)
{
    if (!strcmp(opt.mode, "pub"))
        return publish();
    if (!strcmp(opt.mode, "sub"))
        return subscribe();
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
