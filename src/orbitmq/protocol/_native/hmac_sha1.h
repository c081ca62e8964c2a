/*
 * hmac_sha1.h: SHA-1 (FIPS 180-4, section 6.1) and HMAC-SHA1 (RFC 2104), for the native fast path's
 * check of a signed send (broker/_native/fastpath_auth.c) and for bench/mqload/rocketmq.c, which
 * signs as a client does. Plain C: no Python object, no allocation (hmac_sha1.c; mqload compiles it
 * too).
 *
 * A key is turned once into its two hashing states (the key XOR ipad and XOR opad blocks already
 * absorbed), so a check costs the message's blocks plus two: the broker keeps those states per
 * user, never the secret itself, and wipes them when it drops them.
 *
 * Two block functions: the FIPS rounds, and on x86-64 CPUs with the SHA extensions the same rounds
 * in SHA-NI instructions (about 3x faster: a 64 KiB batch is the body a signed batch send hashes).
 * sha1_pick() chooses once, and only when the instructions agree with the FIPS rounds on a probe;
 * the tests compare both with hashlib.
 */
#ifndef ORBITMQ_PROTOCOL_HMAC_SHA1_H
#define ORBITMQ_PROTOCOL_HMAC_SHA1_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHA1_BLOCK 64
#define SHA1_DIGEST 20
#define SHA1_BASE64 28  /* Base64 of a digest: 27 characters and one '=' */

typedef struct {
    uint32_t h[5];
    uint64_t total;  /* bytes absorbed */
    unsigned char buf[SHA1_BLOCK];
    size_t used;
} Sha1;

typedef struct {
    Sha1 inner, outer;  /* IV after (key ^ ipad), IV after (key ^ opad) */
} HmacKey;

extern int sha1_ni_ok;  /* sha1_pick: the SHA-NI rounds are used */

/* Chooses the block function once (at the module's init; mqload's start). */
void sha1_pick(void);
void sha1_update(Sha1 *s, const unsigned char *p, size_t n);
/* Overwrites ``n`` bytes at ``p`` in a way the compiler keeps (key material being dropped). */
void secure_wipe(void *p, size_t n);
/* RFC 2104 section 2: a key longer than a block is hashed first, then padded with zeros. */
void hmac_sha1_key(HmacKey *k, const unsigned char *key, size_t key_len);
/* The hashing state an HMAC under ``k`` starts from: then sha1_update the text, hmac_sha1_end. */
void hmac_sha1_begin(const HmacKey *k, Sha1 *s);
void hmac_sha1_end(const HmacKey *k, Sha1 *s, unsigned char out[SHA1_DIGEST]);
/* RFC 4648 Base64 of a digest, as Java's Base64 encoder writes it. */
void base64_digest(const unsigned char d[SHA1_DIGEST], char out[SHA1_BASE64]);
/* 1 when the ``n`` bytes are equal; its time depends on ``n`` only. */
int equal_in_constant_time(const unsigned char *a, const unsigned char *b, size_t n);

#endif
