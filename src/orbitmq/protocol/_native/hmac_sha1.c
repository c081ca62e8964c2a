/*
 * hmac_sha1.c: SHA-1 and HMAC-SHA1 (see hmac_sha1.h). Plain C, no Python: bench/mqload builds it
 * too.
 */
#include "protocol/_native/hmac_sha1.h"

static inline uint32_t sha1_rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

/* FIPS 180-4 6.1.2, ``blocks`` 64-byte blocks into ``h``; the four kinds of rounds as four
 * loops (no branch per round). */
#define SHA1_ROUND(f, k)                                                                      \
    do {                                                                                      \
        uint32_t tmp = sha1_rol(a, 5) + (f) + e + (k) + w[t];                                 \
        e = d;                                                                                \
        d = c;                                                                                \
        c = sha1_rol(b, 30);                                                                  \
        b = a;                                                                                \
        a = tmp;                                                                              \
    } while (0)

static void sha1_blocks_fips(uint32_t h[5], const unsigned char *p, size_t blocks)
{
    uint32_t w[80];
    while (blocks--) {
        for (int t = 0; t < 16; t++)
            w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
                   (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
        for (int t = 16; t < 80; t++)
            w[t] = sha1_rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
        int t = 0;
        for (; t < 20; t++)
            SHA1_ROUND((b & c) | (~b & d), 0x5A827999u);  /* Ch */
        for (; t < 40; t++)
            SHA1_ROUND(b ^ c ^ d, 0x6ED9EBA1u);  /* Parity */
        for (; t < 60; t++)
            SHA1_ROUND((b & c) | (b & d) | (c & d), 0x8F1BBCDCu);  /* Maj */
        for (; t < 80; t++)
            SHA1_ROUND(b ^ c ^ d, 0xCA62C1D6u);
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
        p += SHA1_BLOCK;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define SHA1_NI_BUILT 1

/* Four rounds of group ``g`` (rounds 4g..4g+3) with the SHA-NI instructions. The message
 * registers hold words W[4g'..4g'+3] (the first in the high lane) in slot g' % 4; from g = 4 on,
 * slot g % 4 (W of group g - 4) is replaced by W of group g:
 * msg2(msg1(W[g-4], W[g-3]) ^ W[g-2], W[g-1]), FIPS's W[t] = rol(W[t-3]^W[t-8]^W[t-14]^W[t-16], 1).
 * ``prev`` is ABCD before the last four rounds: sha1nexte turns it into this group's E. */
#define SHA1_NI_GROUP(g)                                                                      \
    do {                                                                                      \
        if ((g) >= 4)                                                                         \
            m[(g) & 3] = _mm_sha1msg2_epu32(                                                  \
                _mm_xor_si128(_mm_sha1msg1_epu32(m[(g) & 3], m[((g) + 1) & 3]),               \
                              m[((g) + 2) & 3]),                                              \
                m[((g) + 3) & 3]);                                                            \
        __m128i e = (g) == 0 ? _mm_add_epi32(e0, m[0]) : _mm_sha1nexte_epu32(prev, m[(g) & 3]); \
        prev = abcd;                                                                          \
        abcd = _mm_sha1rnds4_epu32(abcd, e, (g) / 5);                                         \
    } while (0)

__attribute__((target("sha,sse4.1,ssse3")))
static void sha1_blocks_ni(uint32_t h[5], const unsigned char *p, size_t blocks)
{
    const __m128i reverse = _mm_set_epi64x(0x0001020304050607LL, 0x08090a0b0c0d0e0fLL);
    __m128i abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)h), 0x1B);
    __m128i e0 = _mm_set_epi32((int)h[4], 0, 0, 0);
    while (blocks--) {
        __m128i abcd_in = abcd, e_in = e0, prev = abcd, m[4];
        for (int i = 0; i < 4; i++)
            m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), reverse);
        SHA1_NI_GROUP(0); SHA1_NI_GROUP(1); SHA1_NI_GROUP(2); SHA1_NI_GROUP(3);
        SHA1_NI_GROUP(4); SHA1_NI_GROUP(5); SHA1_NI_GROUP(6); SHA1_NI_GROUP(7);
        SHA1_NI_GROUP(8); SHA1_NI_GROUP(9); SHA1_NI_GROUP(10); SHA1_NI_GROUP(11);
        SHA1_NI_GROUP(12); SHA1_NI_GROUP(13); SHA1_NI_GROUP(14); SHA1_NI_GROUP(15);
        SHA1_NI_GROUP(16); SHA1_NI_GROUP(17); SHA1_NI_GROUP(18); SHA1_NI_GROUP(19);
        e0 = _mm_sha1nexte_epu32(prev, e_in);  /* E after round 79, plus E before round 0 */
        abcd = _mm_add_epi32(abcd, abcd_in);
        p += SHA1_BLOCK;
    }
    _mm_storeu_si128((__m128i *)h, _mm_shuffle_epi32(abcd, 0x1B));
    h[4] = (uint32_t)_mm_extract_epi32(e0, 3);
}

static int sha1_ni_present(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3))
        return 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
}
#else
#define SHA1_NI_BUILT 0
static void sha1_blocks_ni(uint32_t h[5], const unsigned char *p, size_t blocks)
{
    sha1_blocks_fips(h, p, blocks);
}
static int sha1_ni_present(void) { return 0; }
#endif

int sha1_ni_ok;  /* sha1_pick: the SHA-NI rounds are used */

static inline void sha1_blocks(uint32_t h[5], const unsigned char *p, size_t blocks)
{
    if (sha1_ni_ok)
        sha1_blocks_ni(h, p, blocks);
    else
        sha1_blocks_fips(h, p, blocks);
}

static void sha1_init(Sha1 *s)
{
    s->h[0] = 0x67452301u;
    s->h[1] = 0xEFCDAB89u;
    s->h[2] = 0x98BADCFEu;
    s->h[3] = 0x10325476u;
    s->h[4] = 0xC3D2E1F0u;
    s->total = 0;
    s->used = 0;
}

void sha1_update(Sha1 *s, const unsigned char *p, size_t n)
{
    s->total += n;
    if (s->used) {
        size_t take = SHA1_BLOCK - s->used < n ? SHA1_BLOCK - s->used : n;
        memcpy(s->buf + s->used, p, take);
        s->used += take;
        p += take;
        n -= take;
        if (s->used < SHA1_BLOCK)
            return;
        sha1_blocks(s->h, s->buf, 1);
        s->used = 0;
    }
    if (n >= SHA1_BLOCK) {
        sha1_blocks(s->h, p, n / SHA1_BLOCK);
        p += n - n % SHA1_BLOCK;
        n %= SHA1_BLOCK;
    }
    memcpy(s->buf, p, n);
    s->used = n;
}

/* Padding (FIPS 180-4 5.1.1) and the digest, big-endian. */
static void sha1_final(Sha1 *s, unsigned char out[SHA1_DIGEST])
{
    uint64_t bits = s->total * 8;
    unsigned char pad[SHA1_BLOCK * 2];
    size_t pad_len = (s->used < 56 ? 56 : 120) - s->used;
    memset(pad, 0, sizeof pad);
    pad[0] = 0x80;
    for (int i = 0; i < 8; i++)
        pad[pad_len + i] = (unsigned char)(bits >> (56 - 8 * i));
    uint64_t total = s->total;
   sha1_update(s, pad, pad_len + 8);
    s->total = total;
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

/* Overwrites ``n`` bytes at ``p`` in a way the compiler keeps (key material being dropped). */
void secure_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

/* RFC 2104 section 2: a key longer than a block is hashed first, then padded with zeros. */
void hmac_sha1_key(HmacKey *k, const unsigned char *key, size_t key_len)
{
    unsigned char block[SHA1_BLOCK], pad[SHA1_BLOCK];
    memset(block, 0, sizeof block);
    if (key_len > SHA1_BLOCK) {
        Sha1 s;
        sha1_init(&s);
       sha1_update(&s, key, key_len);
        sha1_final(&s, block);
       secure_wipe(&s, sizeof s);
    } else {
        memcpy(block, key, key_len);
    }
    for (int i = 0; i < SHA1_BLOCK; i++)
        pad[i] = block[i] ^ 0x36;
    sha1_init(&k->inner);
   sha1_update(&k->inner, pad, SHA1_BLOCK);
    for (int i = 0; i < SHA1_BLOCK; i++)
        pad[i] = block[i] ^ 0x5C;
    sha1_init(&k->outer);
   sha1_update(&k->outer, pad, SHA1_BLOCK);
   secure_wipe(block, sizeof block);
   secure_wipe(pad, sizeof pad);
}

/* The hashing state an HMAC under ``k`` starts from: then sha1_update the text, hmac_sha1_end. */
void hmac_sha1_begin(const HmacKey *k, Sha1 *s) { *s = k->inner; }

void hmac_sha1_end(const HmacKey *k, Sha1 *s, unsigned char out[SHA1_DIGEST])
{
    unsigned char inner[SHA1_DIGEST];
    sha1_final(s, inner);
    *s = k->outer;
   sha1_update(s, inner, SHA1_DIGEST);
    sha1_final(s, out);
}

/* RFC 4648 Base64 of a digest, as Java's Base64 encoder writes it. */
void base64_digest(const unsigned char d[SHA1_DIGEST], char out[SHA1_BASE64])
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int o = 0;
    for (int i = 0; i < 18; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = alphabet[(v >> 6) & 63];
        out[o++] = alphabet[v & 63];
    }
    uint32_t v = (uint32_t)d[18] << 16 | (uint32_t)d[19] << 8;
    out[o++] = alphabet[v >> 18];
    out[o++] = alphabet[(v >> 12) & 63];
    out[o++] = alphabet[(v >> 6) & 63];
    out[o] = '=';
}

/* 1 when the ``n`` bytes are equal; its time depends on ``n`` only. */
int equal_in_constant_time(const unsigned char *a, const unsigned char *b, size_t n)
{
    unsigned char diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

/* Uses the SHA-NI rounds when the CPU has them and they agree with the FIPS rounds on a probe
 * of several lengths (the padding's block boundaries among them). */
void sha1_pick(void)
{
    sha1_ni_ok = 0;
    if (!SHA1_NI_BUILT || !sha1_ni_present())
        return;
    unsigned char probe[300], fips[SHA1_DIGEST], ni[SHA1_DIGEST];
    for (int i = 0; i < (int)sizeof probe; i++)
        probe[i] = (unsigned char)(i * 167 + 13);
    for (size_t n = 0; n <= sizeof probe; n += 11) {
        Sha1 s;
        sha1_init(&s);
       sha1_update(&s, probe, n);
        sha1_final(&s, fips);
        sha1_ni_ok = 1;
        sha1_init(&s);
       sha1_update(&s, probe, n);
        sha1_final(&s, ni);
        sha1_ni_ok = 0;
        if (memcmp(fips, ni, SHA1_DIGEST) != 0)
            return;
    }
    sha1_ni_ok = 1;
}

