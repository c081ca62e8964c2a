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
    const char *sys, *mode, *host, *port, *topic, *ak, *sk;
    long n, procs, window, batch, size, queues, fetch;
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
long long now_ms(void);
void die(const char *what);
void fail(const char *fmt, ...);
/* Counts one error; prints the first ten. */
void report_error(const char *fmt, ...);
Lat *lat_new(void);
void lat_add(Lat *l, double seconds);
int tcp_connect(const char *host, const char *port);
/* Runs fn on count threads, the i-th given (char *)args + i * stride, and waits for them all. */
void run_threads(void *(*fn)(void *), void *args, size_t stride, long count);

/* Each returns the process's exit status; an absent client library says so and returns 2. */
int rocketmq_run(void);
int redis_run(void);
int nats_run(void);
int rabbit_run(void);

#endif
