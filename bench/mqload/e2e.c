/*
 * mqload -mode e2e: what every system's end-to-end run shares (the systems' parts are in
 * rocketmq.c, redis.c and nats.c).
 *
 * One process, one clock (CLOCK_MONOTONIC): the consumer is set up first and says it waits
 * (e2e_set_ready); E2E_SETTLE_MS later the producer starts sending -s byte messages at -rate a
 * second, message i due at start + i / rate (absolute deadlines: a late wake-up sends what is due
 * at once and never shifts the later deadlines). Each body begins with a stamp (E2E_STAMP_BYTES):
 * a magic, this run's id, the message's sequence number and the time of its send in ns, taken just
 * before the bytes are handed to the system's client. The consumer hands each delivered body to
 * e2e_record, which takes the delivery time minus the stamped send time; bodies of other runs or
 * without a stamp (warm-up messages) are ignored, a sequence number seen twice counts as a
 * duplicate. The consumer stops once it has every message sent, or E2E_DRAIN_S after the producer
 * finished. The RESULT line adds rate= e2e_msgs_s= e2e_n= e2e_lost= e2e_dup= e2e_p50_us=
 * e2e_p90_us= e2e_p99_us= e2e_p999_us= e2e_max_us= behind_max_us= (how late the producer got
 * against its schedule: a large value means the load tool, not the system, set the pace).
 *
 * Where a system says when it stored each message (e2e_record's stored_ns: OrbitMQ's store
 * timestamp, a Redis entry id, JetStream's metadata; wall-clock time, moved onto the monotonic
 * clock by the offset between the two read at start), each delivery splits in two: "in", from
 * the send to the store (the producer's write, the server's read and append), and "out", from the
 * store to the delivery (dispatch, the consumer's answer, its read). The line then adds
 * e2e_in_p50_us= e2e_in_p99_us= e2e_out_p50_us= e2e_out_p99_us= and, for the slowest 1% of
 * deliveries (those at or past the p99), the medians of their two parts: e2e_tail_in_us=
 * e2e_tail_out_us=. A store time given in whole milliseconds is taken at the middle of its
 * millisecond, so these are right to about half a millisecond.
 *
 * -dump FILE: a line a first delivery, "seq sent_ns stored_ns delivered_ns" (CLOCK_MONOTONIC ns;
 * stored_ns -1 when the system gave no store time), for a timeline of the late ones against what
 * else ran (bench/e2e_tail.py).
 */
#define _GNU_SOURCE
#include "mqload.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define E2E_MAGIC 0x4D453245u /* "E2EM" in a little-endian dump */
#define E2E_DRAIN_S 5.0
#define E2E_READY_MAX_S 15.0
#define E2E_SETTLE_MS 200

/* The stamp at the start of every body: one process writes and reads it (host byte order). */
typedef struct {
    uint32_t magic, run;
    uint64_t seq;
    int64_t sent_ns;
} Stamp;
_Static_assert(sizeof(Stamp) == E2E_STAMP_BYTES, "the stamp's size");

static struct {
    uint32_t run;
    long long start_ns, behind_max_ns;
    long long last_ns;         /* the latest first delivery (the consumer's) */
    double drain_until, send_secs;
    long sent;                 /* written by the producer before it sets done */
    atomic_int ready, done;
    atomic_long received, dups;
    unsigned char *seen;       /* a bit per sequence number (the consumer's) */
    Lat lat;                   /* delivery - send, seconds (the consumer's) */
    double *in;                /* store - send, seconds, by lat's index (NAN: no store time) */
    FILE *dump;                /* -dump (the consumer's) */
    long long wall_ns;         /* CLOCK_REALTIME - CLOCK_MONOTONIC at start */
} e2e;

long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC, from the closest of a few bracketed reads. */
static long long wall_offset_ns(void)
{
    long long best = -1, offset = 0;
    for (int i = 0; i < 16; i++) {
        struct timespec wall;
        long long before = now_ns();
        clock_gettime(CLOCK_REALTIME, &wall);
        long long after = now_ns();
        if (best < 0 || after - before < best) {
            best = after - before;
            offset = wall.tv_sec * 1000000000LL + wall.tv_nsec - (before + after) / 2;
        }
    }
    return offset;
}

void e2e_init(void)
{
    e2e.run = (uint32_t)now_ns() ^ (uint32_t)getpid() << 16;
    e2e.seen = calloc((size_t)opt.n / 8 + 1, 1);
    e2e.in = malloc(sizeof(double) * ((size_t)opt.n + 1));
    if (e2e.seen == NULL || e2e.in == NULL)
        die("calloc");
    e2e.wall_ns = wall_offset_ns();
    if (opt.dump != NULL && (e2e.dump = fopen(opt.dump, "w")) == NULL)
        die(opt.dump);
}

void e2e_set_ready(void)
{
    atomic_store(&e2e.ready, 1);
}

void e2e_await_ready(void)
{
    double until = now_s() + E2E_READY_MAX_S;
    while (!atomic_load(&e2e.ready)) {
        if (now_s() > until)
            fail("-mode e2e: the consumer was not ready after %.0f s", E2E_READY_MAX_S);
        usleep(1000);
    }
    usleep(E2E_SETTLE_MS * 1000); /* its first reads reach the server and wait there */
}

void e2e_begin(void)
{
    /* Wake-ups at the deadlines, not up to the default 50 us of timer slack after them. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    e2e.start_ns = now_ns();
    deadline = now_s() + opt.maxsec;
}

long long e2e_due_ns(long seq)
{
    return e2e.start_ns + (long long)((double)seq * 1e9 / (double)opt.rate);
}

void e2e_stamp(unsigned char *body, long seq)
{
    Stamp s = {E2E_MAGIC, e2e.run, (uint64_t)seq, now_ns()};
    long long behind = s.sent_ns - e2e_due_ns(seq);
    if (behind > e2e.behind_max_ns)
        e2e.behind_max_ns = behind;
    memcpy(body, &s, sizeof s);
}

/* This run's stamp at the start of ``body``: 0 when there is none (a warm-up, another run). */
static int stamp_of(const void *body, size_t len, Stamp *s)
{
    if (len < sizeof *s)
        return 0;
    memcpy(s, body, sizeof *s);
    return s->magic == E2E_MAGIC && s->run == e2e.run && s->seq < (uint64_t)opt.n;
}

int e2e_sent_ns(const void *body, size_t len, long long *sent_ns)
{
    Stamp s;
    if (!stamp_of(body, len, &s))
        return 0;
    *sent_ns = s.sent_ns;
    return 1;
}

int e2e_record(const void *body, size_t len, long long stored_ns)
{
    long long at = now_ns();
    Stamp s;
    if (!stamp_of(body, len, &s))
        return 0;
    unsigned char bit = (unsigned char)(1u << (s.seq % 8));
    if (e2e.seen[s.seq / 8] & bit) {
        atomic_fetch_add(&e2e.dups, 1);
        return 1;
    }
    e2e.seen[s.seq / 8] |= bit;
    if (e2e.lat.len < opt.n) /* each sequence number once: never past opt.n */
        e2e.in[e2e.lat.len] = stored_ns < 0 ? NAN
                              : (double)(stored_ns - e2e.wall_ns - s.sent_ns) / 1e9;
    lat_add(&e2e.lat, (double)(at - s.sent_ns) / 1e9);
    if (e2e.dump != NULL)
        fprintf(e2e.dump, "%llu %lld %lld %lld\n", (unsigned long long)s.seq, (long long)s.sent_ns,
                stored_ns < 0 ? -1LL : stored_ns - e2e.wall_ns, at);
    e2e.last_ns = at;
    atomic_fetch_add(&e2e.received, 1);
    return 1;
}

void e2e_produced(long sent)
{
    e2e.sent = sent;
    e2e.send_secs = (double)(now_ns() - e2e.start_ns) / 1e9;
    e2e.drain_until = now_s() + E2E_DRAIN_S;
    atomic_store(&e2e.done, 1);
}

int e2e_consuming(void)
{
    if (!atomic_load(&e2e.done))
        return 1;
    return atomic_load(&e2e.received) < e2e.sent && now_s() < e2e.drain_until;
}

int e2e_wait(int fd, long long until_ns)
{
    if (fd < 0) {
        struct timespec ts = {until_ns / 1000000000LL, until_ns % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
        return 0;
    }
    long long left = until_ns - now_ns();
    if (left < 0)
        left = 0;
    struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return ppoll(&p, 1, &ts, NULL) > 0;
}

double e2e_send_secs(void)
{
    return e2e.send_secs > 0 ? e2e.send_secs : 1e-9;
}

typedef struct {
    double total, in;
} Split;

static int split_cmp(const void *a, const void *b)
{
    return lat_cmp(&((const Split *)a)->total, &((const Split *)b)->total);
}

/* The in/out fields (module docstring), from the deliveries that have a store time; none when
 * no delivery has one. */
static void print_split(void)
{
    long n = 0, all = e2e.lat.len;
    Split *v = malloc(sizeof(Split) * (size_t)(all + 1));
    double *in = malloc(sizeof(double) * (size_t)(all + 1)),
           *out = malloc(sizeof(double) * (size_t)(all + 1));
    if (v == NULL || in == NULL || out == NULL)
        die("malloc");
    for (long i = 0; i < all; i++)
        if (!isnan(e2e.in[i]))
            v[n++] = (Split){e2e.lat.v[i], e2e.in[i]};
    if (n > 0) {
        qsort(v, (size_t)n, sizeof(Split), split_cmp);
        long tail = (long)(0.99 * (double)(n - 1)); /* lat_pctl's index of the p99 */
        long tail_n = n - tail;
        for (long i = 0; i < tail_n; i++) {
            in[i] = v[tail + i].in;
            out[i] = v[tail + i].total - v[tail + i].in;
        }
        qsort(in, (size_t)tail_n, sizeof(double), lat_cmp);
        qsort(out, (size_t)tail_n, sizeof(double), lat_cmp);
        double tail_in = lat_pctl(in, tail_n, 0.5), tail_out = lat_pctl(out, tail_n, 0.5);
        for (long i = 0; i < n; i++) {
            in[i] = v[i].in;
            out[i] = v[i].total - v[i].in;
        }
        qsort(in, (size_t)n, sizeof(double), lat_cmp);
        qsort(out, (size_t)n, sizeof(double), lat_cmp);
        printf(" e2e_in_p50_us=%.0f e2e_in_p99_us=%.0f e2e_out_p50_us=%.0f e2e_out_p99_us=%.0f "
               "e2e_tail_in_us=%.0f e2e_tail_out_us=%.0f",
               lat_pctl(in, n, 0.5) * 1e6, lat_pctl(in, n, 0.99) * 1e6,
               lat_pctl(out, n, 0.5) * 1e6, lat_pctl(out, n, 0.99) * 1e6, tail_in * 1e6,
               tail_out * 1e6);
    }
    free(v);
    free(in);
    free(out);
}

void e2e_print(void)
{
    long n = e2e.lat.len, received = atomic_load(&e2e.received);
    double through_s = (double)(e2e.last_ns - e2e.start_ns) / 1e9;
    if (e2e.dump != NULL && fclose(e2e.dump) != 0)
        die(opt.dump);
    e2e.dump = NULL;
    print_split(); /* before the sort below: e2e.in is by lat's index */
    qsort(e2e.lat.v, (size_t)n, sizeof(double), lat_cmp);
    /* e2e_msgs_s: deliveries over the time from the first send to the last delivery (what the
     * whole pipe carried: a -rate above it measures the workload's maximum). */
    printf(" rate=%ld e2e_msgs_s=%.0f e2e_n=%ld e2e_lost=%ld e2e_dup=%ld e2e_p50_us=%.0f "
           "e2e_p90_us=%.0f e2e_p99_us=%.0f e2e_p999_us=%.0f e2e_max_us=%.0f behind_max_us=%.0f",
           opt.rate, through_s > 0 ? (double)received / through_s : 0.0, received,
           e2e.sent - received, atomic_load(&e2e.dups),
           lat_pctl(e2e.lat.v, n, 0.5) * 1e6, lat_pctl(e2e.lat.v, n, 0.9) * 1e6,
           lat_pctl(e2e.lat.v, n, 0.99) * 1e6, lat_pctl(e2e.lat.v, n, 0.999) * 1e6,
           lat_pctl(e2e.lat.v, n, 1.0) * 1e6, (double)e2e.behind_max_ns / 1e3);
}
