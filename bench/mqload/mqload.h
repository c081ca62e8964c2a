/*
 * mqload: the load tool of `make bench` (bench/run_bench.py), one program for every system it
 * compares, so that each is loaded alike: OrbitMQ through RocketMQ's remoting protocol (frames
 * built here), Redis streams (hiredis), NATS JetStream (the NATS C client) and RabbitMQ
 * (rabbitmq-c). Built by bench/mqload/build.sh; each peer's part only where its client library
 * is installed (`make bench-peers` installs all three), so that the OrbitMQ part builds with a C
 * compiler alone.
 */
#ifndef MQLOAD_H
#define MQLOAD_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct {
    const char *sys, *mode, *host, *port, *topic, *ak, *sk, *dump;
    long n, procs, window, batch, size, queues, fetch, rate;
    double maxsec;
} Options;

/* Latencies (seconds) one thread records; merged for the percentiles at the end. */
typedef struct Lat {
    double *v;
    long len, cap;
    struct Lat *next;
} Lat;

extern Options opt;
extern atomic_long counted;  /* messages acknowledged (pub) or received (sub) */
extern atomic_long errors;   /* requests refused or failed */
extern double deadline;      /* monotonic seconds: no new request after it */
extern unsigned char *payload;

double now_s(void);
long long now_ns(void); /* CLOCK_MONOTONIC */
long long now_ms(void);
void die(const char *what);
void fail(const char *fmt, ...);
/* Counts one error; prints the first ten. */
void report_error(const char *fmt, ...);
Lat *lat_new(void);
void lat_add(Lat *l, double seconds);
int lat_cmp(const void *a, const void *b);
/* The q-quantile (0..1) of n sorted values; 0 when there are none. */
double lat_pctl(const double *sorted, long n, double q);
int tcp_connect(const char *host, const char *port);
/* Runs fn on count threads, the i-th given (char *)args + i * stride, and waits for them all. */
void run_threads(void *(*fn)(void *), void *args, size_t stride, long count);

/* -mode e2e (e2e.c). The producer: e2e_begin, then message seq stamped (e2e_stamp) and sent at
 * e2e_due_ns(seq), then e2e_produced(messages sent). The consumer: e2e_set_ready once it waits,
 * e2e_record for each body delivered, until e2e_consuming() says 0. e2e_wait: until until_ns or
 * (fd >= 0) until fd is readable, which it returns 1 for. */
#define E2E_STAMP_BYTES 24
void e2e_init(void);
void e2e_set_ready(void);
void e2e_await_ready(void);
void e2e_begin(void);
long long e2e_due_ns(long seq);
void e2e_stamp(unsigned char *body, long seq);
int e2e_sent_ns(const void *body, size_t len, long long *sent_ns);
/* stored_ns: when the system stored the message, wall-clock ns (CLOCK_REALTIME); -1 unknown. */
int e2e_record(const void *body, size_t len, long long stored_ns);
void e2e_produced(long sent);
int e2e_consuming(void);
int e2e_wait(int fd, long long until_ns);
double e2e_send_secs(void);
void e2e_print(void);

/* Each returns the process's exit status; an absent client library says so and returns 2. */
int rocketmq_run(void);
int redis_run(void);
int nats_run(void);
int rabbit_run(void);

#endif
