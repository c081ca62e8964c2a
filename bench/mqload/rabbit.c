/*
 * mqload -sys rabbit: a durable RabbitMQ queue (-q, default bench-classic; a name with "quorum"
 * in it is a quorum queue) through rabbitmq-c, as guest on the default vhost.
 * pub: persistent messages to the default exchange with publisher confirms, at most -w
 * unconfirmed per connection; a message counts on its confirm (basic.ack, single or multiple).
 * sub: basic.consume with prefetch -b, each delivery acked.
 * setup: declares the queue; purge: empties it.
 */
#include "mqload.h"

#ifdef WITH_RABBIT
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define CHANNEL 1

static void check_reply(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        fail("rabbit %s: %s", what, amqp_error_string2(r.library_error));
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = r.reply.decoded;
        fail("rabbit %s: channel closed: %d %.*s", what, m->reply_code, (int)m->reply_text.len,
             (char *)m->reply_text.bytes);
    }
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *m = r.reply.decoded;
        fail("rabbit %s: connection closed: %d %.*s", what, m->reply_code,
             (int)m->reply_text.len, (char *)m->reply_text.bytes);
    }
    fail("rabbit %s: server error", what);
}

static amqp_connection_state_t connect_rabbit(void)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (s == NULL)
        fail("rabbit: no socket");
    int st = amqp_socket_open(s, opt.host, atoi(opt.port));
    if (st != AMQP_STATUS_OK)
        fail("rabbit %s:%s: %s", opt.host, opt.port, amqp_error_string2(st));
    check_reply(amqp_login(c, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest"),
                "login");
    amqp_channel_open(c, CHANNEL);
    check_reply(amqp_get_rpc_reply(c), "channel open");
    return c;
}

static void close_rabbit(amqp_connection_state_t c)
{
    amqp_channel_close(c, CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

static void *produce(void *arg)
{
    long count = *(long *)arg, sent = 0, confirmed = 0;
    amqp_connection_state_t c = connect_rabbit();
    amqp_confirm_select(c, CHANNEL);
    check_reply(amqp_get_rpc_reply(c), "confirm.select");
    Lat *lat = lat_new();
    double *sent_at = calloc((size_t)count + 1, sizeof(double));
    if (sent_at == NULL)
        die("calloc");
    amqp_basic_properties_t props = {0};
    props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
    props.delivery_mode = 2; /* persistent */
    amqp_bytes_t body = {(size_t)opt.size, payload};
    while (confirmed < sent || (sent < count && now_s() < deadline)) {
        while (sent < count && sent - confirmed < opt.window && now_s() < deadline) {
            sent_at[++sent] = now_s(); /* delivery tags count from 1 */
            int st = amqp_basic_publish(c, CHANNEL, amqp_empty_bytes, amqp_cstring_bytes(opt.topic),
                                        0, 0, &props, body);
            if (st != AMQP_STATUS_OK)
                fail("rabbit publish: %s", amqp_error_string2(st));
        }
        if (confirmed == sent)
            break;
        amqp_frame_t f;
        struct timeval tv = {30, 0};
        int st = amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (st != AMQP_STATUS_OK)
            fail("rabbit waiting for confirms: %s", amqp_error_string2(st));
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        uint64_t tag;
        int multiple, ok = 1;
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = f.payload.method.decoded;
            tag = a->delivery_tag;
            multiple = a->multiple;
        } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            amqp_basic_nack_t *a = f.payload.method.decoded;
            tag = a->delivery_tag;
            multiple = a->multiple;
            ok = 0;
        } else {
            fail("rabbit: unexpected method 0x%08x while waiting for confirms",
                 f.payload.method.id);
            return NULL;
        }
        long upto = (long)tag, from = multiple ? confirmed + 1 : upto;
        if (upto > sent || upto <= confirmed)
            continue; /* a tag out of order: already counted */
        double t = now_s();
        for (long k = from; k <= upto; k++)
            lat_add(lat, t - sent_at[k]);
        if (ok)
            atomic_fetch_add(&counted, upto - from + 1);
        else
            report_error("rabbit: %ld message(s) nacked", upto - from + 1);
        confirmed = upto; /* RabbitMQ confirms in order on a channel */
    }
    free(sent_at);
    close_rabbit(c);
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

static int subscribe(amqp_connection_state_t c)
{
    amqp_basic_qos(c, CHANNEL, 0, (uint16_t)(opt.fetch > 65535 ? 65535 : opt.fetch), 0);
    check_reply(amqp_get_rpc_reply(c), "basic.qos");
    amqp_basic_consume(c, CHANNEL, amqp_cstring_bytes(opt.topic), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    check_reply(amqp_get_rpc_reply(c), "basic.consume");
    while (atomic_load(&counted) < opt.n && now_s() < deadline) {
        amqp_envelope_t env;
        struct timeval tv = {0, 500000};
        amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        check_reply(r, "consume");
        amqp_basic_ack(c, CHANNEL, env.delivery_tag, 0);
        amqp_destroy_envelope(&env);
        atomic_fetch_add(&counted, 1);
    }
    return 0;
}

static int admin(amqp_connection_state_t c)
{
    if (!strcmp(opt.mode, "purge")) {
        amqp_queue_purge(c, CHANNEL, amqp_cstring_bytes(opt.topic));
        check_reply(amqp_get_rpc_reply(c), "queue.purge");
        return 0;
    }
    amqp_table_entry_t kind;
    kind.key = amqp_cstring_bytes("x-queue-type");
    kind.value.kind = AMQP_FIELD_KIND_UTF8;
    kind.value.value.bytes = amqp_cstring_bytes(strstr(opt.topic, "quorum") ? "quorum" : "classic");
    amqp_table_t args = {1, &kind};
    amqp_queue_declare(c, CHANNEL, amqp_cstring_bytes(opt.topic), 0, 1, 0, 0, args);
    check_reply(amqp_get_rpc_reply(c), "queue.declare");
    return 0;
}

int rabbit_run(void)
{
    if (!strcmp(opt.mode, "pub"))
        return publish();
    amqp_connection_state_t c = connect_rabbit();
    int rc = !strcmp(opt.mode, "sub") ? subscribe(c) : admin(c);
    close_rabbit(c);
    return rc;
}
#else
int rabbit_run(void)
{
    fail("built without rabbitmq-c (make bench-peers installs librabbitmq-dev)");
    return 2;
}
#endif
