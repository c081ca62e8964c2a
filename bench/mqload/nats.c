/*
 * mqload -sys nats: NATS JetStream (stream BENCH, subjects bench.>, file storage, one replica)
 * through the NATS C client.
 * pub: -w > 1: asynchronous publishes to bench.load, at most -w unacknowledged per connection
 * (the send time rides in the payload's first bytes, so that the ack handler can tell the
 * latency); -w 1: one synchronous publish at a time. A message counts on its PubAck.
 * sub: a pull consumer (durable benchc) fetching -b at a time, each message acked.
 * setup: (re)creates the stream; purge: empties it and drops the consumer.
 */
#include "mqload.h"

#ifdef WITH_NATS
#include <nats/nats.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define STREAM "BENCH"
#define SUBJECT "bench.load"
#define DURABLE "benchc"
#define FETCH_WAIT_MS 500

typedef struct {
    long count;
    Lat *lat;
} Producer;

static void check(natsStatus s, const char *what)
{
    if (s != NATS_OK)
        fail("nats %s: %s (%s)", what, natsStatus_GetText(s), nats_GetLastError(NULL));
}

static natsConnection *connect_nats(void)
{
    char url[300];
    snprintf(url, sizeof url, "nats://%s:%s", opt.host, opt.port);
    natsConnection *nc;
    check(natsConnection_ConnectTo(&nc, url), "connect");
    return nc;
}

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    Producer *pr = closure;
    (void)js;
    if (pa != NULL) {
        double sent;
        memcpy(&sent, natsMsg_GetData(msg), sizeof sent);
        lat_add(pr->lat, now_s() - sent);
        atomic_fetch_add(&counted, 1);
    } else {
        report_error("publish: %s", pae && pae->ErrText ? pae->ErrText : "no PubAck");
    }
    natsMsg_Destroy(msg);
}

static void *produce(void *arg)
{
    Producer *pr = arg;
    natsConnection *nc = connect_nats();
    jsCtx *js;
    jsOptions o;
    jsOptions_Init(&o);
    o.PublishAsync.MaxPending = opt.window;
    o.PublishAsync.AckHandler = on_ack;
    o.PublishAsync.AckHandlerClosure = pr;
    o.PublishAsync.StallWait = 30000; /* a full window waits for acks, not an error */
    check(natsConnection_JetStream(&js, nc, &o), "jetstream");
    unsigned char *data = malloc((size_t)opt.size);
    if (data == NULL)
        die("malloc");
    memcpy(data, payload, (size_t)opt.size);
    for (long i = 0; i < pr->count && now_s() < deadline; i++) {
        if (opt.window == 1) {
            jsPubAck *pa = NULL;
            jsErrCode jerr = 0;
            double t = now_s();
            natsStatus s = js_Publish(&pa, js, SUBJECT, data, (int)opt.size, NULL, &jerr);
            lat_add(pr->lat, now_s() - t);
            if (s == NATS_OK)
                atomic_fetch_add(&counted, 1);
            else
                report_error("publish: %s (%d)", natsStatus_GetText(s), (int)jerr);
            jsPubAck_Destroy(pa);
            continue;
        }
        double t = now_s();
        memcpy(data, &t, sizeof t);
        natsMsg *m;
        check(natsMsg_Create(&m, SUBJECT, NULL, (const char *)data, (int)opt.size), "message");
        natsStatus s = js_PublishMsgAsync(js, &m, NULL);
        if (s != NATS_OK)
            report_error("publish: %s", natsStatus_GetText(s));
        natsMsg_Destroy(m);
    }
    if (opt.window > 1) {
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = 60000;
        check(js_PublishAsyncComplete(js, &po), "waiting for the acks");
    }
    free(data);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return NULL;
}

static int publish(void)
{
    Producer prs[64];
    for (long i = 0; i < opt.procs; i++) {
        prs[i].count = opt.n / opt.procs + (i < opt.n % opt.procs);
        prs[i].lat = lat_new();
    }
    run_threads(produce, prs, sizeof prs[0], opt.procs);
    return 0;
}

static int subscribe(jsCtx *js)
{
    natsSubscription *sub;
    jsErrCode jerr = 0;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = STREAM;
    check(js_PullSubscribe(&sub, js, "bench.>", DURABLE, NULL, &so, &jerr), "pull subscribe");
    while (atomic_load(&counted) < opt.n && now_s() < deadline) {
        natsMsgList list = {0};
        natsStatus s = natsSubscription_Fetch(&list, sub, (int)opt.fetch, FETCH_WAIT_MS, &jerr);
        if (s == NATS_TIMEOUT)
            continue;
        check(s, "fetch");
        for (int i = 0; i < list.Count; i++)
            natsMsg_Ack(list.Msgs[i], NULL);
        atomic_fetch_add(&counted, list.Count);
        natsMsgList_Destroy(&list);
    }
    natsSubscription_Destroy(sub);
    return 0;
}

static int admin(jsCtx *js)
{
    jsErrCode jerr = 0;
    if (!strcmp(opt.mode, "purge")) {
        check(js_PurgeStream(js, STREAM, NULL, &jerr), "purge");
        js_DeleteConsumer(js, STREAM, DURABLE, NULL, &jerr); /* absent: nothing to drop */
        return 0;
    }
    js_DeleteStream(js, STREAM, NULL, &jerr); /* absent: nothing to drop */
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    const char *subjects[] = {"bench.>"};
    cfg.Name = STREAM;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = 1;
    jsStreamInfo *si = NULL;
    check(js_AddStream(&si, js, &cfg, NULL, &jerr), "add stream");
    jsStreamInfo_Destroy(si);
    return 0;
}

int nats_run(void)
{
    if (!strcmp(opt.mode, "pub"))
        return publish();
    natsConnection *nc = connect_nats();
    jsCtx *js;
    check(natsConnection_JetStream(&js, nc, NULL), "jetstream");
    int rc = !strcmp(opt.mode, "sub") ? subscribe(js) : admin(js);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return rc;
}
#else
int nats_run(void)
{
    fail("built without the NATS C client (make bench-peers installs libnats-dev)");
    return 2;
}
#endif
