/*
 * mqload -sys nats: NATS JetStream (stream BENCH, subjects bench.>, file storage, one replica)
 * through the NATS C client.
 * pub: -w > 1: asynchronous publishes to bench.load, at most -w unacknowledged per connection
 * (the send time rides in the payload's first bytes, so that the ack handler can tell the
 * latency); -w 1: one synchronous publish at a time. A message counts on its PubAck.
 * sub: a pull consumer (durable benchc) fetching -b at a time, each message acked.
 * e2e: the consumer, on its own connection, a push subscription (js_Subscribe, an ephemeral
 * consumer delivering only what arrives after it is created, each message acked by the library
 * once the callback returns, as a push consumer does) to bench.e2e; the producer, on a
 * connection that writes each publish at once (natsOptions_SetSendAsap), asynchronous
 * publishes to bench.e2e, at most -w unacknowledged, each sent when due.
 * setup: (re)creates the stream; purge: empties it and drops the consumer.
 */
#include "mqload.h"

#ifdef WITH_NATS
#include <nats/nats.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STREAM "BENCH"
#define SUBJECT "bench.load"
#define DURABLE "benchc"
#define FETCH_WAIT_MS 500
#define E2E_SUBJECT "bench.e2e"
#define E2E_ACKS_MAX_MS 30000

typedef struct {
    long count;
    Lat *lat;
} Producer;

static void check(natsStatus s, const char *what)
{
    if (s != NATS_OK)
        fail("nats %s: %s (%s)", what, natsStatus_GetText(s), nats_GetLastError(NULL));
}

/* A connection; ``asap``: each publish written at once, not left to the flusher thread. */
static natsConnection *connect_with(int asap)
{
    char url[300];
    snprintf(url, sizeof url, "nats://%s:%s", opt.host, opt.port);
    natsOptions *o;
    check(natsOptions_Create(&o), "options");
    check(natsOptions_SetURL(o, url), "url");
    if (asap)
        check(natsOptions_SetSendAsap(o, true), "send asap");
    natsConnection *nc;
    check(natsConnection_Connect(&nc, o), "connect");
    natsOptions_Destroy(o);
    return nc;
}

static natsConnection *connect_nats(void)
{
    return connect_with(0);
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

/* ------------------------------------------------------------------------------------ e2e */
static void on_delivery(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)nc, (void)sub, (void)closure;
    jsMsgMetaData *meta = NULL; /* its Timestamp: when the stream stored it, wall-clock ns */
    long long stored_ns = natsMsg_GetMetaData(&meta, msg) == NATS_OK ? meta->Timestamp : -1;
    e2e_record(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), stored_ns);
    if (meta != NULL)
        jsMsgMetaData_Destroy(meta);
    natsMsg_Destroy(msg);
}

static void on_e2e_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    Lat *lat = closure;
    long long sent_ns;
    (void)js;
    if (pa != NULL) {
        if (e2e_sent_ns(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), &sent_ns))
            lat_add(lat, (double)(now_ns() - sent_ns) / 1e9);
        atomic_fetch_add(&counted, 1);
    } else {
        report_error("publish: %s", pae && pae->ErrText ? pae->ErrText : "no PubAck");
    }
    natsMsg_Destroy(msg);
}

/* Publishes opt.n messages at opt.rate; returns how many were sent. */
static long e2e_produce(void)
{
    natsConnection *nc = connect_with(1);
    jsCtx *js;
    jsOptions o;
    jsOptions_Init(&o);
    o.PublishAsync.MaxPending = opt.window;
    o.PublishAsync.AckHandler = on_e2e_ack;
    o.PublishAsync.AckHandlerClosure = lat_new();
    o.PublishAsync.StallWait = 30000;
    check(natsConnection_JetStream(&js, nc, &o), "jetstream");
    long sent = 0;
    e2e_begin();
    while (sent < opt.n && now_s() <= deadline) {
        e2e_wait(-1, e2e_due_ns(sent));
        long long t = now_ns();
        while (sent < opt.n && e2e_due_ns(sent) <= t && now_s() <= deadline) {
            e2e_stamp(payload, sent++);
            natsMsg *m;
            check(natsMsg_Create(&m, E2E_SUBJECT, NULL, (const char *)payload, (int)opt.size),
                  "message");
            natsStatus s = js_PublishMsgAsync(js, &m, NULL);
            if (s != NATS_OK)
                report_error("publish: %s", natsStatus_GetText(s));
            natsMsg_Destroy(m);
        }
    }
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = E2E_ACKS_MAX_MS;
    check(js_PublishAsyncComplete(js, &po), "waiting for the acks");
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return sent;
}

static int end_to_end(void)
{
    natsConnection *nc = connect_nats();
    jsCtx *js;
    check(natsConnection_JetStream(&js, nc, NULL), "jetstream");
    natsSubscription *sub;
    jsErrCode jerr = 0;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = STREAM;
    so.Config.DeliverPolicy = js_DeliverNew;
    check(js_Subscribe(&sub, js, E2E_SUBJECT, on_delivery, NULL, NULL, &so, &jerr),
          "push subscribe");
    e2e_set_ready(); /* the consumer exists on the server, its deliveries come to this callback */
    e2e_await_ready();
    e2e_produced(e2e_produce());
    while (e2e_consuming())
        usleep(10000);
    natsSubscription_Unsubscribe(sub); /* the ephemeral consumer goes with it */
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return 0;
}

int nats_run(void)
{
    if (!strcmp(opt.mode, "pub"))
        return publish();
    if (!strcmp(opt.mode, "e2e"))
        return end_to_end();
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
