/*
 * stored_encode.c: the stored form's one encoder (see stored_encode.h) and zlib's CRC-32.
 */
#include <dlfcn.h>
#include <limits.h>

#include "protocol/_native/stored_encode.h"

zlib_crc32_fn crc32_zlib;  /* NULL: the table below */
static uint32_t crc32_table[8][256];

/* Loads libz's crc32 (the one Python's zlib module wraps); the slice-by-8 table otherwise. */
void crc32_init(void)
{
    void *lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL)
        crc32_zlib = (zlib_crc32_fn)dlsym(lib, "crc32");
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32_table[t][i] = (crc32_table[t - 1][i] >> 8) ^ crc32_table[0][crc32_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_by_table(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = crc32_table[7][lo & 0xFF] ^ crc32_table[6][(lo >> 8) & 0xFF] ^
              crc32_table[5][(lo >> 16) & 0xFF] ^ crc32_table[4][lo >> 24] ^
              crc32_table[3][p[4]] ^ crc32_table[2][p[5]] ^ crc32_table[1][p[6]] ^
              crc32_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc32_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CRC32_CLMUL_BUILT 1
int crc32_clmul_ok;  /* set by crc32_init: the CPU has PCLMULQDQ */

/* One 128-bit lane folded forward over 2^k bits: lo * k.lo ^ hi * k.hi (carry-less). */
__attribute__((target("pclmul,sse2")))
static inline __m128i crc32_fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* zlib.crc32(p[0:n]) for n >= 64, carry-less multiplication folding four 128-bit lanes (the
 * constants are x^(512+-32) and x^(128+-32) mod the reflected polynomial, the "fold by 4" and
 * "fold by 1" distances). The folded 128 bits have the CRC of everything folded, so the table
 * finishes them and the tail: no Barrett reduction to get wrong. About 8x zlib 1.2's rate. */
__attribute__((target("pclmul,sse2")))
static uint32_t crc32_clmul(const unsigned char *p, size_t n)
{
    const __m128i k4 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);  /* 512-bit distance */
    const __m128i k1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);  /* 128-bit distance */
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128(-1));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = _mm_xor_si128(crc32_fold(x0, k4), _mm_loadu_si128((const __m128i *)p));
        x1 = _mm_xor_si128(crc32_fold(x1, k4), _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = _mm_xor_si128(crc32_fold(x2, k4), _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = _mm_xor_si128(crc32_fold(x3, k4), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x0 = _mm_xor_si128(crc32_fold(x0, k1), x1);
    x0 = _mm_xor_si128(crc32_fold(x0, k1), x2);
    x0 = _mm_xor_si128(crc32_fold(x0, k1), x3);
    while (n >= 16) {
        x0 = _mm_xor_si128(crc32_fold(x0, k1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    unsigned char folded[16];
    _mm_storeu_si128((__m128i *)folded, x0);
    /* The raw state is 0 before the folded bytes (the initial ~0 went into the first lane). */
    return crc32_by_table(crc32_by_table(0xFFFFFFFFu, folded, 16), p, n);
}

__attribute__((target("pclmul,sse2")))
static int crc32_clmul_works(void)
{
    unsigned char probe[200];
    for (int i = 0; i < (int)sizeof probe; i++)
        probe[i] = (unsigned char)(i * 131 + 7);
    for (size_t n = 64; n <= sizeof probe; n += 17)
        if (crc32_clmul(probe, n) != crc32_by_table(0, probe, n))
            return 0;
    return 1;
}
#else
#define CRC32_CLMUL_BUILT 0
int crc32_clmul_ok = 0;
static inline uint32_t crc32_clmul(const unsigned char *p, size_t n) { return crc32_by_table(0, p, n); }
#endif

/* Picks the carry-less path when the CPU has it and it agrees with the table on a probe. */
void crc32_pick(void)
{
#if CRC32_CLMUL_BUILT
    __builtin_cpu_init();
    crc32_clmul_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2")
                     && crc32_clmul_works();
#endif
}

#define CRC32_CLMUL_MIN 64  /* below it the table (or libz) is as fast */

/* zlib.crc32(p[0:n]) */
uint32_t crc32_of(const unsigned char *p, Py_ssize_t n)
{
    if (crc32_clmul_ok && n >= CRC32_CLMUL_MIN)
        return crc32_clmul(p, (size_t)n);
    if (crc32_zlib == NULL)
        return crc32_by_table(0, p, (size_t)n);
    unsigned long crc = 0;
    while (n > 0) {
        unsigned int chunk = n > (Py_ssize_t)(UINT_MAX / 2) ? UINT_MAX / 2 : (unsigned int)n;
        crc = crc32_zlib(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}


/* stored._encode._check_context: whether the parts are well formed (no caller should pass bad
 * ones); on success sets the host kind bits of the sysFlag from the hosts. */
int context_check(StoreContext *c)
{
    if (c->topic_len < 2 || c->topic[0] != c->topic_len - 1)
        return CONTEXT_BAD_TOPIC;
    if ((c->born_len != HOST_V4_SIZE && c->born_len != HOST_V6_SIZE) ||
        (c->store_len != HOST_V4_SIZE && c->store_len != HOST_V6_SIZE))
        return CONTEXT_BAD_HOST;
    c->sys_flag = (c->sys_flag & ~SYSFLAG_HOST_V6_BITS) |
                  (c->born_len == HOST_V6_SIZE ? SYSFLAG_BORNHOST_V6 : 0) |
                  (c->store_len == HOST_V6_SIZE ? SYSFLAG_STOREHOST_V6 : 0);
    return CONTEXT_OK;
}

Py_ssize_t stored_size(const StoreContext *c, Py_ssize_t body_len, Py_ssize_t props_len)
{
    return header_size(c->sys_flag) + body_len + c->topic_len + 2 + props_len;
}

static int needs_separator(const unsigned char *props, Py_ssize_t n)
{
    return n > 0 && props[n - 1] != 0x02;
}

/* One message in stored form at ``w`` (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and
 * PREPAREDTRANSACTIONOFFSET zero), its properties followed by a final separator when
 * ``add_separator``; returns its size. ``w`` has room for it (stored_size). */
Py_ssize_t write_stored(unsigned char *w, const StoreContext *c, int32_t flag,
                               const unsigned char *body, Py_ssize_t body_len,
                               const unsigned char *props, Py_ssize_t props_len, int add_separator)
{
    Py_ssize_t out_props = props_len + (add_separator ? 1 : 0);
    Py_ssize_t stored = stored_size(c, body_len, out_props);
    put_i32(w + TOTALSIZE_AT, (int32_t)stored);
    put_i32(w + MAGICCODE_AT, MAGIC_CODE);
    put_i32(w + BODYCRC_AT, (int32_t)(crc32_of(body, body_len) & 0x7FFFFFFFu));
    put_i32(w + QUEUEID_AT, c->queue_id);
    put_i32(w + FLAG_AT, flag);
    put_i64(w + QUEUEOFFSET_AT, 0);
    put_i64(w + PHYSICALOFFSET_AT, 0);
    put_i32(w + SYSFLAG_AT, c->sys_flag);
    put_i64(w + BORNTIMESTAMP_AT, c->born_ts);
    w += BORNHOST_AT;
    memcpy(w, c->born, (size_t)c->born_len);
    w += c->born_len;
    put_i64(w, 0);  /* STORETIMESTAMP */
    w += 8;
    memcpy(w, c->store, (size_t)c->store_len);
    w += c->store_len;
    put_i32(w + TAIL_RECONSUMETIMES_AT, c->reconsume);
    put_i64(w + TAIL_PREPAREDTRANSACTIONOFFSET_AT, 0);
    put_i32(w + TAIL_BODY_LENGTH_AT, (int32_t)body_len);
    w += HEADER_TAIL_SIZE;
    memcpy(w, body, (size_t)body_len);
    w += body_len;
    memcpy(w, c->topic, (size_t)c->topic_len);
    w += c->topic_len;
    w[0] = (unsigned char)((uint16_t)out_props >> 8);
    w[1] = (unsigned char)out_props;
    if (props_len > 0)
        memcpy(w + 2, props, (size_t)props_len);
    if (add_separator)
        w[2 + props_len] = 0x02;
    return stored;
}

/* stored.patch_positions for one message at ``m`` (physical offset ``phy``); returns the next
 * queue offset. */
int64_t patch_one(unsigned char *m, int64_t phy, int64_t qoff, int64_t now)
{
    int32_t sys_flag = get_i32(m + SYSFLAG_AT);
    if (takes_queue_entry(sys_flag)) {
        put_i64(m + QUEUEOFFSET_AT, qoff);
        qoff++;
    } else {
        put_i64(m + QUEUEOFFSET_AT, 0);
    }
    put_i64(m + PHYSICALOFFSET_AT, phy);
    put_i64(m + store_ts_at(sys_flag), now);
    return qoff;
}


/* The checks of encode_wire_single_py, in its order. */
void single_plan(const unsigned char *p, Py_ssize_t n, SinglePlan *plan)
{
    plan->status = SINGLE_OK;
    plan->add_separator = 0;
    if (n > PROPERTIES_SIZE_MAX) {
        plan->status = SINGLE_PROPS_SIZE;
        plan->detail = n;
        return;
    }
    plan->problem = props_check(p, n, &plan->found, &plan->item_no);
    if (plan->problem != PROPS_OK) {
        plan->status = SINGLE_PROPS_RULE;
        return;
    }
    if (plan->found.delay.p != NULL || plan->found.tran_msg.p != NULL) {
        plan->status = SINGLE_ROUTED;
        return;
    }
    plan->add_separator = needs_separator(p, n);
    if (n + plan->add_separator > PROPERTIES_SIZE_MAX) {
        plan->status = SINGLE_PROPS_SIZE;
        plan->detail = n + plan->add_separator;
    }
}


/* protocol.batch.iter_entries' length checks of the entry at ``pos`` (same order). */
static int entry_problem(const unsigned char *b, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t *detail)
{
    Py_ssize_t left = end - pos;
    if (left < BATCH_ENTRY_OVERHEAD) {
        *detail = left;
        return BATCH_ENTRY_TRUNCATED;
    }
    int32_t total = get_i32(b + pos + BATCH_TOTAL_AT), body_len = get_i32(b + pos + BATCH_BODY_LEN_AT);
    if (body_len < 0 || body_len > left - BATCH_ENTRY_OVERHEAD) {
        *detail = body_len;
        return BATCH_BAD_BODY_LENGTH;
    }
    int16_t props_len = get_i16(b + pos + BATCH_BODY_AT + body_len);
    if (props_len < 0 || props_len > left - BATCH_ENTRY_OVERHEAD - body_len)
        return BATCH_BAD_PROPS_LENGTH;
    if ((Py_ssize_t)total != BATCH_ENTRY_OVERHEAD + (Py_ssize_t)body_len + props_len) {
        *detail = total;
        return BATCH_TOTAL_DISAGREES;
    }
    return BATCH_OK;
}

#define ENTRY_SIZE(e) (BATCH_ENTRY_OVERHEAD + (e).body_len + (e).props_len)

/* The checks of encode_wire_batch_py in its order, and the stored size of the batch. With
 * ``check_props`` (may be NULL) every entry's properties must also pass it (the fast path's
 * allow-list: BATCH_ROUTED when one does not). */
void batch_plan(const unsigned char *b, Py_ssize_t end, const StoreContext *c,
                       Py_ssize_t max_message_size, Py_ssize_t max_blob_size,
                       int (*check_props)(const void *, const unsigned char *, Py_ssize_t),
                       const void *check_arg, BatchPlan *plan)
{
    BatchEntry e;
    PropsFound found;
    int routed = 0;
    Py_ssize_t pos;
    memset(plan, 0, sizeof *plan);
    /* pass 1: lengths and properties, entry by entry */
    for (pos = 0; pos < end; pos += ENTRY_SIZE(e)) {
        plan->pos = pos;
        plan->status = entry_problem(b, end, pos, &plan->detail);
        if (plan->status != BATCH_OK)
            return;
        read_entry(b, pos, &e);
        plan->problem = props_check(e.props, e.props_len, &found, &plan->item_no);
        if (plan->problem != PROPS_OK) {
            plan->status = BATCH_PROPS_RULE;
            return;
        }
        routed |= found.delay.p != NULL || found.tran_msg.p != NULL;
        plan->without_uniq += found.uniq.p == NULL || found.uniq.len == 0;
        if (check_props != NULL && !check_props(check_arg, e.props, e.props_len))
            routed = 1;
        plan->count++;
    }
    if (plan->count == 0) {
        plan->status = BATCH_EMPTY;
        return;
    }
    if (routed) {
        plan->status = BATCH_ROUTED;
        return;
    }
    /* pass 2: limits, entry by entry */
    for (pos = 0; pos < end; pos += ENTRY_SIZE(e)) {
        read_entry(b, pos, &e);
        plan->pos = pos;
        if (e.body_len > max_message_size) {
            plan->status = BATCH_BODY_TOO_BIG;
            plan->detail = e.body_len;
            return;
        }
        Py_ssize_t props_out = e.props_len + needs_separator(e.props, e.props_len);
        if (props_out > PROPERTIES_SIZE_MAX) {
            plan->status = BATCH_PROPS_SIZE;
            plan->detail = props_out;
            return;
        }
        plan->out_size += stored_size(c, e.body_len, props_out);
        if (plan->out_size > max_blob_size) {
            plan->status = BATCH_BLOB_TOO_BIG;
            return;
        }
    }
}

/* Pass 3 of a planned batch: every entry in stored form at ``o``, back to back; ``rels`` (may
 * be NULL) gets where each starts. Returns the bytes written (the plan's out_size). */
Py_ssize_t batch_write(unsigned char *o, const unsigned char *b, Py_ssize_t end,
                              const StoreContext *c, Py_ssize_t *rels)
{
    BatchEntry e;
    Py_ssize_t at = 0, i = 0;
    for (Py_ssize_t pos = 0; pos < end; pos += ENTRY_SIZE(e), i++) {
        read_entry(b, pos, &e);
        if (rels != NULL)
            rels[i] = at;
        at += write_stored(o + at, c, e.flag, e.body, e.body_len, e.props, e.props_len,
                           needs_separator(e.props, e.props_len));
    }
    return at;
}

