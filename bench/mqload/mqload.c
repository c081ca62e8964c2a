/*
 * mqload's command line, shared helpers and result line.
 *
 *   mqload -sys rocketmq|redis|nats|rabbit [-mode pub|sub|e2e|setup|purge] [-addr HOST:PORT]
 *          [-q TOPIC|QUEUE] [-n N] [-p PRODUCERS] [-w IN_FLIGHT] [-batch K] [-s BYTES]
 *          [-queues Q] [-b FETCH] [-rate MSGS_S] [-maxsec S] [-ak ACCESS_KEY -sk SECRET_KEY]
 *          [-dump FILE]
 *
 * pub: -p connections (a thread each) send -n messages of -s bytes between them, at most -w
 * requests unanswered per connection (-w 1: one at a time, for latency); a message counts when
 * the system acknowledged it. sub: one connection reads -n messages, -b at a time. setup/purge
 * (nats, rabbit): create or empty the stream / queue the runs use; built: exit 0 when this
 * build has -sys's client library, 3 when not. e2e (rocketmq, redis, nats; e2e.c): a waiting
 * consumer and one producer sending -n messages at -rate a second in one process, the delivery
 * latency of each message taken on one clock (n, msgs_s and p50_us.. are then the producer's:
 * messages acknowledged, their rate over the sending time, send to acknowledgement); -dump
 * writes a line a delivery to FILE (e2e.c).
 * Every pub, sub or e2e run stops sending after -maxsec and prints one line:
 *   RESULT sys= mode= p= w= n= secs= msgs_s= MB_s= p50_us= p99_us= p90_us= p999_us= errors= ...
 * and exits 1 when any request was refused.
 */
#define _GNU_SOURCE
#include "mqload.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

Options opt = {.sys = "rocketmq", .mode = "pub", .host = "127.0.0.1", .n = 200000, .procs = 1,
               .window = 1000, .batch = 1, .size = 1024, .queues = 8, .fetch = 32, .maxsec = 40,
               .rate = 0};
atomic_long counted, errors;
double deadline;
unsigned char *payload;

static pthread_mutex_t lat_lock = PTHREAD_MUTEX_INITIALIZER;
static Lat *lat_all;

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

void die(const char *what)
{
    perror(what);
    exit(2);
}

void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mqload: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

void report_error(const char *fmt, ...)
{
    if (atomic_fetch_add(&errors, 1) >= 10)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

Lat *lat_new(void)
{
    Lat *l = calloc(1, sizeof *l);
    if (l == NULL)
        die("calloc");
    pthread_mutex_lock(&lat_lock);
    l->next = lat_all;
    lat_all = l;
    pthread_mutex_unlock(&lat_lock);
    return l;
}

void lat_add(Lat *l, double seconds)
{
    if (l->len == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        l->v = realloc(l->v, sizeof(double) * (size_t)l->cap);
        if (l->v == NULL)
            die("realloc");
    }
    l->v[l->len++] = seconds;
}

void run_threads(void *(*fn)(void *), void *args, size_t stride, long count)
{
    pthread_t *threads = calloc((size_t)count, sizeof(pthread_t));
    if (threads == NULL)
        die("calloc");
    for (long i = 0; i < count; i++)
        if (pthread_create(&threads[i], NULL, fn, (char *)args + (size_t)i * stride) != 0)
            die("pthread_create");
    for (long i = 0; i < count; i++)
        pthread_join(threads[i], NULL);
    free(threads);
}

int tcp_connect(const char *host, const char *port)
{
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        fail("cannot resolve %s:%s", host, port);
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connect");
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int lat_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double lat_pctl(const double *sorted, long n, double q)
{
    return n ? sorted[(long)(q * (double)(n - 1))] : 0;
}

static void print_result(double secs)
{
    long total = 0;
    for (Lat *l = lat_all; l; l = l->next)
        total += l->len;
    double *all = calloc((size_t)total + 1, sizeof(double));
    if (all == NULL)
        die("calloc");
    long at = 0;
    for (Lat *l = lat_all; l; l = l->next) {
        memcpy(all + at, l->v, sizeof(double) * (size_t)l->len);
        at += l->len;
    }
    qsort(all, (size_t)total, sizeof(double), lat_cmp);
#define PCTL(q) (lat_pctl(all, total, (q)) * 1e6)
    long n = atomic_load(&counted);
    int sub = strcmp(opt.mode, "sub") == 0;
    printf("RESULT sys=%s mode=%s p=%ld w=%ld n=%ld secs=%.2f msgs_s=%.0f MB_s=%.1f p50_us=%.0f "
           "p99_us=%.0f p90_us=%.0f p999_us=%.0f errors=%ld",
           opt.sys, opt.mode, sub ? 1 : opt.procs, sub ? opt.fetch : opt.window, n, secs,
           n / secs, n * (double)opt.size / secs / 1e6, PCTL(0.5), PCTL(0.99), PCTL(0.9),
           PCTL(0.999), atomic_load(&errors));
    if (strcmp(opt.sys, "rocketmq") == 0)
        printf(" batch=%ld queues=%ld ser=json signed=%d", opt.batch, opt.queues, opt.ak != NULL);
    if (strcmp(opt.mode, "e2e") == 0)
        e2e_print();
    printf("\n");
    free(all);
}

static long number(const char *flag, const char *v, long lo, long hi)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || x < lo || x > hi)
        fail("%s %s: expected a whole number in %ld..%ld", flag, v, lo, hi);
    return x;
}

static const char *default_port(const char *sys)
{
    if (!strcmp(sys, "rocketmq"))
        return "10911";
    if (!strcmp(sys, "redis"))
        return "6379";
    if (!strcmp(sys, "nats"))
        return "4222";
    if (!strcmp(sys, "rabbit"))
        return "5672";
    fail("-sys %s: expected rocketmq, redis, nats or rabbit", sys);
    return NULL;
}

/* Whether this build speaks to ``sys`` (build.sh leaves out a peer whose library is absent). */
static int built_with(const char *sys)
{
    if (!strcmp(sys, "rocketmq"))
        return 1;
#ifdef WITH_REDIS
    if (!strcmp(sys, "redis"))
        return 1;
#endif
#ifdef WITH_NATS
    if (!strcmp(sys, "nats"))
        return 1;
#endif
#ifdef WITH_RABBIT
    if (!strcmp(sys, "rabbit"))
        return 1;
#endif
    return 0;
}

int main(int argc, char **argv)
{
    static char addr[256];
    const char *addr_arg = NULL;
    int queue_given = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            fail("%s needs a value", k);
        if (!strcmp(k, "-sys")) opt.sys = v;
        else if (!strcmp(k, "-mode")) opt.mode = v;
        else if (!strcmp(k, "-addr")) addr_arg = v;
        else if (!strcmp(k, "-q")) { opt.topic = v; queue_given = 1; }
        else if (!strcmp(k, "-n")) opt.n = number(k, v, 1, 1L << 40);
        else if (!strcmp(k, "-p")) opt.procs = number(k, v, 1, 64);
        else if (!strcmp(k, "-w")) opt.window = number(k, v, 1, 1 << 20);
        else if (!strcmp(k, "-batch")) opt.batch = number(k, v, 1, 4096);
        else if (!strcmp(k, "-s")) opt.size = number(k, v, 8, 1 << 22);
        else if (!strcmp(k, "-queues")) opt.queues = number(k, v, 1, 1024);
        else if (!strcmp(k, "-b")) opt.fetch = number(k, v, 1, 65536);
        else if (!strcmp(k, "-rate")) opt.rate = number(k, v, 1, 10000000);
        else if (!strcmp(k, "-maxsec")) {
            opt.maxsec = atof(v);
            if (!(opt.maxsec > 0 && opt.maxsec <= 3600))
                fail("-maxsec %s: expected seconds in (0, 3600]", v);
        }
        else if (!strcmp(k, "-dump")) opt.dump = v;
        else if (!strcmp(k, "-ak")) opt.ak = v;
        else if (!strcmp(k, "-sk")) opt.sk = v;
        else fail("unknown option %s", k);
    }
    opt.port = default_port(opt.sys);
    if (addr_arg != NULL) {
        snprintf(addr, sizeof addr, "%s", addr_arg);
        char *colon = strrchr(addr, ':');
        if (colon == NULL || colon[1] == 0)
            fail("-addr %s: expected HOST:PORT", addr_arg);
        *colon = 0;
        opt.host = addr;
        opt.port = colon + 1;
    }
    if (!queue_given)
        opt.topic = strcmp(opt.sys, "rabbit") == 0 ? "bench-classic" : "bench";
    if ((opt.ak == NULL) != (opt.sk == NULL))
        fail("-ak and -sk go together");
    if (opt.ak != NULL && strcmp(opt.sys, "rocketmq") != 0)
        fail("-ak/-sk sign RocketMQ requests only");
    if (opt.batch > 1 && strcmp(opt.sys, "rocketmq") != 0)
        fail("-batch is for -sys rocketmq only");
    if (!strcmp(opt.mode, "built"))
        return built_with(opt.sys) ? 0 : 3;
    int e2e = !strcmp(opt.mode, "e2e");
    if (strcmp(opt.mode, "pub") && strcmp(opt.mode, "sub") && !e2e && strcmp(opt.mode, "setup") &&
        strcmp(opt.mode, "purge"))
        fail("-mode %s: expected pub, sub, e2e, setup, purge or built", opt.mode);
    if (e2e && opt.rate == 0)
        fail("-mode e2e needs -rate MSGS_PER_S");
    if (opt.rate && !e2e)
        fail("-rate is for -mode e2e only");
    if (e2e && !strcmp(opt.sys, "rabbit"))
        fail("-mode e2e: not for -sys rabbit (rocketmq, redis or nats)");
    if (e2e && (opt.batch > 1 || opt.ak != NULL || opt.procs > 1))
        fail("-mode e2e: one producer sending one message a request, unsigned (no -batch, -p, -ak)");
    if (opt.dump != NULL && !e2e)
        fail("-dump is for -mode e2e only");
    if (e2e && opt.size < E2E_STAMP_BYTES)
        fail("-mode e2e: -s %ld: the send time needs %d bytes", opt.size, E2E_STAMP_BYTES);
    if (e2e)
        e2e_init();
    payload = malloc((size_t)opt.size);
    if (payload == NULL)
        die("malloc");
    for (long i = 0; i < opt.size; i++)
        payload[i] = (unsigned char)('a' + i % 26);
    srand((unsigned)now_ms() ^ (unsigned)getpid());
    double t0 = now_s();
    deadline = t0 + opt.maxsec;
    int rc;
    if (!strcmp(opt.sys, "rocketmq"))
        rc = rocketmq_run();
    else if (!strcmp(opt.sys, "redis"))
        rc = redis_run();
    else if (!strcmp(opt.sys, "nats"))
        rc = nats_run();
    else
        rc = rabbit_run();
    if (!strcmp(opt.mode, "pub") || !strcmp(opt.mode, "sub") || e2e) {
        print_result(e2e ? e2e_send_secs() : now_s() - t0);
        if (rc == 0 && atomic_load(&errors) > 0)
            rc = 1;
    }
    return rc;
}
