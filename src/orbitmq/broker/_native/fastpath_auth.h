/*
 * fastpath_auth.h: the native fast path's check of a signed send (fastpath_auth.c), for
 * fastpath.c. With authentication on, a send is the fast path's only when all of this holds;
 * anything else is declined to the Python path, whose guard (security/guard.py) answers the
 * refusal and audits it, or lets the request through:
 *
 * - its extFields (at most EXT_FIELDS_MAX, keys ASCII and each given once, a V2 topic "b" and
 *   no V1 "topic" beside it) carry a non-empty AccessKey and Signature as strings;
 * - the access key is an enabled user of the snapshot Python pushed (set_users: the registry's
 *   users, each as its HMAC key states; Python owns them, this is a copy, replaced whole on
 *   every registry change);
 * - Signature is the Base64 HMAC-SHA1, under that user's secret, of the values of every
 *   extField but Signature, sorted by key (Java's String order: byte order for ASCII keys),
 *   then the body (security/signature.py's remoting_content), compared in constant time. Only
 *   the canonical Base64 (what every client writes) is compared: another spelling of the same
 *   bytes is the Python path's to judge;
 * - with authorization on, the user is a Super user, or (user, topic) is in the set of pairs
 *   the guard allowed a send for since the last registry change (allow(): Python adds a pair
 *   after its guard admitted such a send, for users whose rules name no source address).
 *
 * Nothing about a signature is remembered: every frame is checked. A send code in the
 * authentication whitelist is taken unsigned, as the guard lets it through.
 */
#ifndef ORBITMQ_BROKER_FASTPATH_AUTH_H
#define ORBITMQ_BROKER_FASTPATH_AUTH_H

#include "broker/_native/wire_request.h"
#include "protocol/_native/hmac_sha1.h"

/* A connection's record under the stateful strategy: security/stateful.py's layout (u64 LE
 * registry version, i64 LE expiry in epoch ms, u8 name length, the name). */
#define AUTH_SESSION_HEAD 17
#define AUTH_SESSION_NAME_MAX 64
#define AUTH_SESSION_SIZE (AUTH_SESSION_HEAD + AUTH_SESSION_NAME_MAX)

#define ALLOWED_PAIRS_MAX 65536  /* (user, topic) pairs kept; past it the guard keeps deciding */
#define AUTH_NAME_MAX 65535      /* bytes of a user name or topic in a pair key */

enum {
    AUTH_OK = 0,
    AUTH_FRAME,          /* not a send frame this reader takes (auth_check only) */
    AUTH_NO_KEY,         /* no AccessKey, or an empty one */
    AUTH_UNSIGNED,       /* no Signature, or an empty one */
    AUTH_UNKNOWN_USER,
    AUTH_DISABLED,
    AUTH_BAD_SIGNATURE,
    AUTH_NOT_ALLOWED,    /* not a Super user, and the pair is not (yet) in the set */
    AUTH_FIELDS,         /* too many extFields, a key twice, a non-ASCII key, or "topic" */
    AUTH_REASONS,
};

extern const char *const AUTH_REASON_NAMES[AUTH_REASONS];

typedef struct {
    unsigned char *name;  /* the access key (user name), UTF-8 */
    Py_ssize_t name_len;
    HmacKey key;
    int enabled, super;
} AuthUser;

typedef struct {
    uint32_t hash;
    unsigned char *key;  /* u16 user length, user, topic */
    Py_ssize_t len;
} AuthPair;

typedef struct {
    int on;             /* authentication: sends must be signed (fixed at construction) */
    int authorization;  /* rules: Normal users need an allowed pair (fixed at construction) */
    unsigned open_codes;  /* the send codes of the whitelist: bit 0 SEND_MESSAGE, 1 V2, 2 batch */
    long long stateful_ms;  /* the stateful strategy's trust of a connection; 0: stateless */
    unsigned long long version;  /* the registry's version of the snapshot */
    AuthUser *users;
    Py_ssize_t user_count;
    Py_ssize_t *user_slots;  /* open addressing: index + 1 into users, 0 free */
    size_t user_mask;
    AuthPair *pairs;  /* open addressing, key NULL free */
    Py_ssize_t pair_count;
    size_t pair_mask;  /* capacity - 1; 0 with no table */
    unsigned long long declined[AUTH_REASONS];
} AuthState;

/* set_users(version, {name: (secret: bytes, enabled: bool, super: bool)}): the registry's users,
 * replacing the last snapshot and emptying the allowed pairs. Returns the users kept. */
PyObject *fp_set_users(AuthState *a, PyObject *const *args, Py_ssize_t nargs);
/* allow(version, user, topic) -> bool: a send the guard admitted (see fastpath_auth.c). */
PyObject *fp_allow(AuthState *a, PyObject *const *args, Py_ssize_t nargs);
/* The whole check of one request, in this thread: AUTH_OK or the reason it is declined. */
/* ``session``: the connection's record (AUTH_SESSION_SIZE bytes, read and written under the
 * stateful strategy) or NULL; ``now_ms``: epoch milliseconds. */
int auth_verdict(const AuthState *a, const WireRequest *r, Span topic, unsigned char *session,
                 long long now_ms);
/* Drops the users (their keys wiped) and the pairs. */
void auth_free(AuthState *a);

#endif
