/*
 * signbench.c: mqbench's RocketMQ publish load (../shared/bench/mqbench -sys rocketmq), signing
 * every request as RocketMQ's clients do, for bench/auth_bench.py: the same requests with and
 * without credentials, so that a broker's cost of checking signatures and rules is measured.
 *
 *   signbench -addr H:P -q TOPIC [-n N] [-p P] [-w W] [-batch K] [-s BYTES] [-queues Q]
 *             [-maxsec S] [-ak ACCESS_KEY -sk SECRET_KEY]
 *
 * Like mqbench's pub: one TCP connection per producer (-p, a thread each), SEND_MESSAGE_V2 (310)
 * with JSON headers a..m, or with -batch K > 1 SEND_BATCH_MESSAGE (320) with K messages in
 * RocketMQ's batch encoding; a UNIQ_KEY property per message; queue ids round-robin over
 * -queues; at most -w requests unanswered per connection (-w 1: one at a time, latency). With
 * -ak/-sk each request carries AccessKey and a Signature: Base64 HMAC-SHA1 (the broker's own
 * src/orbitmq/protocol/_hmac_sha1.h) of the extFields' values sorted by key, then the body.
 * A message counts when its request is answered with code 0. Prints mqbench's line:
 *   RESULT sys=rocketmq mode=pub p= w= n= secs= msgs_s= MB_s= p50_us= p99_us= p90_us= p999_us=
 *          batch= queues= ser=json errors= signed=0|1
 * Built by auth_bench.py with the system's cc (-O2 -pthread).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../src/orbitmq/protocol/_hmac_sha1.h"

#define CODE_SEND_V2 310
#define CODE_SEND_BATCH 320

static const char *host = "127.0.0.1", *port = "10911", *topic = "bench", *ak, *sk;
static long n_total = 200000, procs = 1, window = 1000, batch = 1, size = 1024, queues = 8;
static double maxsec = 40;
static unsigned char *payload;
static HmacKey key;
static atomic_long acked, errors, uniq_counter;
static double deadline;

typedef struct {
    int id;
    long count;    /* messages this producer sends */
    double *lat;   /* seconds per answered request */
    long lat_len;
} Producer;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static void put(Buf *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        while (b->len + n > b->cap)
            b->cap = b->cap ? 2 * b->cap : 65536;
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL)
            die("realloc");
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u32(Buf *b, uint32_t v)
{
    unsigned char x[4] = {v >> 24, v >> 16, v >> 8, v};
    put(b, x, 4);
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

/* A UNIQ_KEY property as mqbench writes one. */
static int uniq_props(char *out, unsigned prefix)
{
    long c = atomic_fetch_add(&uniq_counter, 1);
    return sprintf(out, "UNIQ_KEY\x01%08X%04X%08X%08X%04X\x02", 0x7F000001u, (unsigned)getpid() & 0xFFFF,
                   prefix, (unsigned)(now_ms() & 0xFFFFFFFF), (unsigned)(c & 0xFFFF));
}

/* One request frame appended to ``out``. */
static void append_request(Buf *out, Buf *body, int opaque, int qid, long m, unsigned prefix)
{
    char qs[16], dq[16], born[24], props[64];
    body->len = 0;
    int props_len = 0;
    if (batch > 1) {
        for (long j = 0; j < m; j++) {
            char p[64];
            int pl = uniq_props(p, prefix);
            put_u32(body, (uint32_t)(20 + size + 2 + pl));
            put_u32(body, 0);
            put_u32(body, 0);
            put_u32(body, 0);
            put_u32(body, (uint32_t)size);
            put(body, payload, (size_t)size);
            unsigned char pl16[2] = {(unsigned char)(pl >> 8), (unsigned char)pl};
            put(body, pl16, 2);
            put(body, p, (size_t)pl);
        }
    } else {
        put(body, payload, (size_t)size);
        props_len = uniq_props(props, prefix);
    }
    snprintf(qs, sizeof qs, "%d", qid);
    snprintf(dq, sizeof dq, "%ld", queues);
    snprintf(born, sizeof born, "%lld", now_ms());
    /* extFields in key order (AccessKey sorts before the lower-case names), then Signature */
    const char *keys[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"};
    const char *vals[] = {"mqbench", topic, "TBW102", dq, qs, "0", born, "0", props, "0", "false",
                          batch > 1 ? "true" : "false"};
    size_t lens[12];
    for (int i = 0; i < 12; i++)
        lens[i] = i == 8 ? (size_t)props_len : strlen(vals[i]);
    char signature[SHA1_BASE64];
    if (ak != NULL) {
        Sha1 s;
        unsigned char digest[SHA1_DIGEST];
        hmac_sha1_begin(&key, &s);
        sha1_update(&s, (const unsigned char *)ak, strlen(ak));
        for (int i = 0; i < 12; i++)
            sha1_update(&s, (const unsigned char *)vals[i], lens[i]);
        sha1_update(&s, (const unsigned char *)body->p, body->len);
        hmac_sha1_end(&key, &s, digest);
        base64_digest(digest, signature);
    }
    Buf h = {0};
    char head[160];
    int n = snprintf(head, sizeof head, "{\"code\":%d,\"language\":\"GO\",\"version\":0,\"opaque\":%d,"
                     "\"flag\":0,\"remark\":\"\",\"extFields\":{",
                     batch > 1 ? CODE_SEND_BATCH : CODE_SEND_V2, opaque);
    put(&h, head, (size_t)n);
    for (int i = 0; i < 12; i++) {
        if (i)
            put(&h, ",", 1);
        put_json_string(&h, keys[i], 1);
        put(&h, ":", 1);
        put_json_string(&h, vals[i], lens[i]);
    }
    if (ak != NULL) {
        put(&h, ",\"AccessKey\":", 13);
        put_json_string(&h, ak, strlen(ak));
        put(&h, ",\"Signature\":", 13);
        put_json_string(&h, signature, SHA1_BASE64);
    }
    put(&h, "}}", 2);
    put_u32(out, (uint32_t)(4 + h.len + body->len));
    put_u32(out, (uint32_t)h.len);  /* serialize type JSON */
    put(out, h.p, h.len);
    put(out, body->p, body->len);
    free(h.p);
}

static long json_int(const char *h, size_t n, const char *name)
{
    char *at = memmem(h, n, name, strlen(name));
    return at == NULL ? -1 : strtol(at + strlen(name), NULL, 10);
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

static void *produce(void *arg)
{
    Producer *pr = arg;
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        die("getaddrinfo");
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connect");
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    long reqs = (pr->count + batch - 1) / batch, sent = 0, answered = 0, msgs_sent = 0;
    long *msgs_of = calloc((size_t)reqs + 1, sizeof(long));
    double *sent_at = calloc((size_t)reqs + 1, sizeof(double));
    pr->lat = calloc((size_t)reqs + 1, sizeof(double));
    unsigned prefix = (unsigned)rand();
    Buf out = {0}, body = {0}, in = {0};
    in.cap = 1 << 20;
    in.p = malloc(in.cap);
    if (msgs_of == NULL || sent_at == NULL || pr->lat == NULL || in.p == NULL)
        die("calloc");
    int stopped = 0;
    while (answered < sent || (!stopped && sent < reqs)) {
        out.len = 0;
        while (!stopped && sent < reqs && sent - answered < window) {
            if (now_s() > deadline) {
                stopped = 1;
                break;
            }
            long m = pr->count - msgs_sent < batch ? pr->count - msgs_sent : batch;
            append_request(&out, &body, (int)sent, (int)((pr->id + sent) % queues), m, prefix);
            msgs_of[sent] = m;
            sent_at[sent] = now_s();
            msgs_sent += m;
            sent++;
        }
        if (out.len)
            write_all(fd, out.p, out.len);
        if (answered == sent)
            continue;
        if (in.len == in.cap)
            die("answer too large");
        ssize_t r = read(fd, in.p + in.len, in.cap - in.len);
        if (r <= 0)
            die("read");
        in.len += (size_t)r;
        size_t pos = 0;
        while (in.len - pos >= 8) {
            const unsigned char *f = (const unsigned char *)in.p + pos;
            uint32_t total = (uint32_t)f[0] << 24 | f[1] << 16 | f[2] << 8 | f[3];
            if (in.len - pos < 4 + (size_t)total)
                break;
            uint32_t hlen = ((uint32_t)f[5] << 16 | f[6] << 8 | f[7]);
            const char *hdr = (const char *)f + 8;
            long code = json_int(hdr, hlen, "\"code\":");
            long opaque = json_int(hdr, hlen, "\"opaque\":");
            if (opaque >= 0 && opaque < sent) {
                pr->lat[pr->lat_len++] = now_s() - sent_at[opaque];
                if (code == 0) {
                    atomic_fetch_add(&acked, msgs_of[opaque]);
                } else if (atomic_fetch_add(&errors, 1) < 10) {
                    fprintf(stderr, "send of %ld message(s): code %ld: %.*s\n", msgs_of[opaque],
                            code, (int)(hlen < 300 ? hlen : 300), hdr);
                }
                answered++;
            }
            pos += 4 + total;
        }
        memmove(in.p, in.p + pos, in.len - pos);
        in.len -= pos;
    }
    close(fd);
    free(out.p);
    free(body.p);
    free(in.p);
    free(msgs_of);
    free(sent_at);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static char addr[256];
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "-addr")) {
            snprintf(addr, sizeof addr, "%s", v);
            char *colon = strrchr(addr, ':');
            if (colon == NULL) {
                fprintf(stderr, "-addr host:port\n");
                return 2;
            }
            *colon = 0;
            host = addr;
            port = colon + 1;
        } else if (!strcmp(k, "-q")) topic = v;
        else if (!strcmp(k, "-n")) n_total = atol(v);
        else if (!strcmp(k, "-p")) procs = atol(v);
        else if (!strcmp(k, "-w")) window = atol(v);
        else if (!strcmp(k, "-batch")) batch = atol(v);
        else if (!strcmp(k, "-s")) size = atol(v);
        else if (!strcmp(k, "-queues")) queues = atol(v);
        else if (!strcmp(k, "-maxsec")) maxsec = atof(v);
        else if (!strcmp(k, "-ak")) ak = v;
        else if (!strcmp(k, "-sk")) sk = v;
        else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
    }
    if (n_total < 1 || procs < 1 || procs > 64 || window < 1 || batch < 1 || batch > 4096 ||
        size < 0 || size > (1 << 22) || queues < 1 || (ak == NULL) != (sk == NULL)) {
        fprintf(stderr, "bad options (n, p 1..64, w, batch 1..4096, s, queues; -ak with -sk)\n");
        return 2;
    }
    sha1_pick();
    if (sk != NULL)
        hmac_sha1_key(&key, (const unsigned char *)sk, strlen(sk));
    payload = malloc((size_t)size + 1);
    for (long i = 0; i < size; i++)
        payload[i] = (unsigned char)('a' + i % 26);
    srand((unsigned)now_ms() ^ (unsigned)getpid());
    Producer *prs = calloc((size_t)procs, sizeof(Producer));
    pthread_t *threads = calloc((size_t)procs, sizeof(pthread_t));
    double t0 = now_s();
    deadline = t0 + maxsec;
    for (long i = 0; i < procs; i++) {
        prs[i].id = (int)i;
        prs[i].count = n_total / procs + (i < n_total % procs);
        if (pthread_create(&threads[i], NULL, produce, &prs[i]) != 0)
            die("pthread_create");
    }
    for (long i = 0; i < procs; i++)
        pthread_join(threads[i], NULL);
    double el = now_s() - t0;
    long total_lat = 0;
    for (long i = 0; i < procs; i++)
        total_lat += prs[i].lat_len;
    double *lat = calloc((size_t)total_lat + 1, sizeof(double));
    for (long i = 0, at = 0; i < procs; i++) {
        memcpy(lat + at, prs[i].lat, sizeof(double) * (size_t)prs[i].lat_len);
        at += prs[i].lat_len;
    }
    qsort(lat, (size_t)total_lat, sizeof(double), cmp_double);
#define PCTL(q) (total_lat ? lat[(long)((q) * (total_lat - 1))] * 1e6 : 0)
    long count = atomic_load(&acked);
    printf("RESULT sys=rocketmq mode=pub p=%ld w=%ld n=%ld secs=%.2f msgs_s=%.0f MB_s=%.1f "
           "p50_us=%.0f p99_us=%.0f p90_us=%.0f p999_us=%.0f batch=%ld queues=%ld ser=json "
           "errors=%ld signed=%d\n",
           procs, window, count, el, count / el, count * (double)size / el / 1e6, PCTL(0.5),
           PCTL(0.99), PCTL(0.9), PCTL(0.999), batch, queues, atomic_load(&errors), ak != NULL);
    return atomic_load(&errors) > 0 ? 1 : 0;
}
