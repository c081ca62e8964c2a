/*
 * wire_request.c: the reader of wire_request.h. Every read is bounds-checked (a peer's bytes).
 */
#include "broker/_native/wire_request.h"

/* 1 when kept (or ignored), 0 when given twice: declined. Every field is also listed in
 * ext_key / ext_value (the signature covers them all). */
static int keep_field(WireRequest *r, const unsigned char *key, Py_ssize_t key_len, Span value)
{
    if (r->ext_count < EXT_FIELDS_MAX) {
        r->ext_key[r->ext_count].p = key;
        r->ext_key[r->ext_count].len = key_len;
        r->ext_value[r->ext_count++] = value;
    } else {
        r->ext_overflow = 1;
    }
    if (key_len == 1 && key[0] >= 'a' && key[0] < 'a' + SEND_FIELDS) {
        Span *to = &r->send[key[0] - 'a'];
        if (to->p != NULL)
            return 0;
        *to = value;  /* never NULL, even when empty: it points into the header or scratch */
    } else if (key_len == 13 && memcmp(key, "producerGroup", 13) == 0) {
        r->has_v1_names = 1;
    }
    return 1;
}

/* -- JSON, strict ----------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
    unsigned char *scratch;  /* where unescaped strings go; as long as the header */
    Py_ssize_t used;
} JsonCursor;

static void json_ws(JsonCursor *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int json_hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return 0;
    }
    *out = v;
    return 1;
}

/* A string at the cursor (its opening quote): its text in ``out`` (into the input when it has
 * no escape, else unescaped into the scratch); 0 when malformed or declined. */
static int json_string(JsonCursor *j, Span *out)
{
    if (j->p >= j->end || *j->p != '"')
        return 0;
    const unsigned char *s = ++j->p;
    while (j->p < j->end && *j->p != '"' && *j->p != '\\') {
        if (*j->p < 0x20)
            return 0;
        j->p++;
    }
    if (j->p >= j->end)
        return 0;
    if (*j->p == '"') {
        out->p = s;
        out->len = j->p - s;
        j->p++;
        return 1;
    }
    unsigned char *w = j->scratch + j->used, *start = w;
    memcpy(w, s, (size_t)(j->p - s));
    w += j->p - s;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = *j->p++;
        if (c < 0x20)
            return 0;
        if (c != '\\') {
            *w++ = c;
            continue;
        }
        if (j->p >= j->end)
            return 0;
        c = *j->p++;
        switch (c) {
        case '"': case '\\': case '/':
            *w++ = c;
            break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned u;
            if (j->end - j->p < 4 || !json_hex4(j->p, &u) || (u >= 0xD800 && u <= 0xDFFF))
                return 0;  /* surrogates decline: the Python decoder decides about them */
            j->p += 4;
            if (u < 0x80) {
                *w++ = (unsigned char)u;
            } else if (u < 0x800) {
                *w++ = (unsigned char)(0xC0 | (u >> 6));
                *w++ = (unsigned char)(0x80 | (u & 0x3F));
            } else {
                *w++ = (unsigned char)(0xE0 | (u >> 12));
                *w++ = (unsigned char)(0x80 | ((u >> 6) & 0x3F));
                *w++ = (unsigned char)(0x80 | (u & 0x3F));
            }
            break;
        }
        default:
            return 0;
        }
    }
    if (j->p >= j->end)
        return 0;
    j->p++;
    out->p = start;
    out->len = w - start;
    j->used += w - start;
    return 1;
}

/* An integer literal (at most JSON_DIGITS_MAX digits, no fraction or exponent); 0 otherwise. */
static int json_int(JsonCursor *j, int64_t *out)
{
    int neg = 0, digits = 0;
    int64_t v = 0;
    if (j->p < j->end && *j->p == '-') {
        neg = 1;
        j->p++;
    }
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return 0;
    if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
        return 0;  /* a leading zero: not JSON */
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (++digits > JSON_DIGITS_MAX)
            return 0;
        v = v * 10 + (*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return 0;
    *out = neg ? -v : v;
    return 1;
}

static int json_literal(JsonCursor *j, const char *word, Py_ssize_t n)
{
    if (j->end - j->p < n || memcmp(j->p, word, (size_t)n) != 0)
        return 0;
    j->p += n;
    return 1;
}

/* Any value, checked and passed over (strings still go through the scratch). */
static int json_skip(JsonCursor *j, int depth)
{
    Span ignored;
    int64_t n;
    if (depth > JSON_DEPTH_MAX || j->p >= j->end)
        return 0;
    unsigned char c = *j->p;
    if (c == '"')
        return json_string(j, &ignored);
    if (c == '-' || (c >= '0' && c <= '9'))
        return json_int(j, &n);
    if (c == 't')
        return json_literal(j, "true", 4);
    if (c == 'f')
        return json_literal(j, "false", 5);
    if (c == 'n')
        return json_literal(j, "null", 4);
    if (c != '[' && c != '{')
        return 0;
    unsigned char close = c == '[' ? ']' : '}';
    j->p++;
    json_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 1;
    }
    for (;;) {
        if (close == '}') {
            if (!json_string(j, &ignored))
                return 0;
            json_ws(j);
            if (j->p >= j->end || *j->p++ != ':')
                return 0;
            json_ws(j);
        }
        if (!json_skip(j, depth + 1))
            return 0;
        json_ws(j);
        if (j->p >= j->end)
            return 0;
        if (*j->p == close) {
            j->p++;
            return 1;
        }
        if (*j->p++ != ',')
            return 0;
        json_ws(j);
    }
}

/* An int32 field, or null (the default) unless ``required``; 0 when declined. */
static int json_i32_field(JsonCursor *j, int32_t *out, int required)
{
    int64_t v;
    if (!required && j->p < j->end && *j->p == 'n') {
        *out = 0;
        return json_literal(j, "null", 4);
    }
    if (!json_int(j, &v) || v < INT32_MIN || v > INT32_MAX)
        return 0;
    *out = (int32_t)v;
    return 1;
}

/* extFields: an object of text values (null: none). */
static int json_ext_fields(JsonCursor *j, WireRequest *r)
{
    if (j->p < j->end && *j->p == 'n')
        return json_literal(j, "null", 4);
    if (j->p >= j->end || *j->p++ != '{')
        return 0;
    json_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 1;
    }
    for (;;) {
        Span key, value;
        if (!json_string(j, &key))
            return 0;
        json_ws(j);
        if (j->p >= j->end || *j->p++ != ':')
            return 0;
        json_ws(j);
        if (!json_string(j, &value) || !keep_field(r, key.p, key.len, value))
            return 0;
        json_ws(j);
        if (j->p >= j->end)
            return 0;
        if (*j->p == '}') {
            j->p++;
            return 1;
        }
        if (*j->p++ != ',')
            return 0;
        json_ws(j);
    }
}

enum { SEEN_CODE = 1, SEEN_OPAQUE = 2, SEEN_FLAG = 4, SEEN_VERSION = 8, SEEN_REMARK = 16,
       SEEN_EXT = 32 };

static int key_is(Span key, const char *name)
{
    size_t n = strlen(name);
    return (size_t)key.len == n && memcmp(key.p, name, n) == 0;
}

/* One top-level member's value (the key read); 0 when declined. */
static int json_member(JsonCursor *j, WireRequest *r, Span key, int *seen)
{
    int bit = key_is(key, "code") ? SEEN_CODE : key_is(key, "opaque") ? SEEN_OPAQUE
            : key_is(key, "flag") ? SEEN_FLAG : key_is(key, "version") ? SEEN_VERSION
            : key_is(key, "remark") ? SEEN_REMARK : key_is(key, "extFields") ? SEEN_EXT : 0;
    if (bit & *seen)
        return 0;
    *seen |= bit;
    Span text;
    switch (bit) {
    case SEEN_CODE: return json_i32_field(j, &r->code, 1);
    case SEEN_OPAQUE: return json_i32_field(j, &r->opaque, 0);
    case SEEN_FLAG: return json_i32_field(j, &r->flag, 0);
    case SEEN_VERSION: return json_i32_field(j, &r->version, 0);
    case SEEN_REMARK:
        if (j->p < j->end && *j->p == 'n')
            return json_literal(j, "null", 4);
        return json_string(j, &text);
    case SEEN_EXT: return json_ext_fields(j, r);
    default: return json_skip(j, 1);  /* language, serializeTypeCurrentRPC, ... */
    }
}

static int read_json_header(const unsigned char *h, Py_ssize_t n, unsigned char *scratch,
                            WireRequest *r)
{
    if (!utf8_valid(h, n))
        return 0;
    JsonCursor j = {h, h + n, scratch, 0};
    int seen = 0;
    json_ws(&j);
    if (j.p >= j.end || *j.p++ != '{')
        return 0;
    json_ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            Span key;
            if (!json_string(&j, &key))
                return 0;
            json_ws(&j);
            if (j.p >= j.end || *j.p++ != ':')
                return 0;
            json_ws(&j);
            if (!json_member(&j, r, key, &seen))
                return 0;
            json_ws(&j);
            if (j.p >= j.end)
                return 0;
            if (*j.p == '}') {
                j.p++;
                break;
            }
            if (*j.p++ != ',')
                return 0;
            json_ws(&j);
        }
    }
    json_ws(&j);
    return j.p == j.end && (seen & SEEN_CODE);
}

/* -- binary (ROCKETMQ) ------------------------------------------------------------------------ */


static int read_binary_header(const unsigned char *h, Py_ssize_t n, WireRequest *r)
{
    if (n < BIN_FIXED + 4)
        return 0;
    r->code = get_i16(h);
    r->version = get_i16(h + 3);
    r->opaque = get_i32(h + 5);
    r->flag = get_i32(h + 9);
    Py_ssize_t remark = get_i32(h + 13), pos = BIN_FIXED;
    if (remark < 0 || n - pos < remark + 4 || !utf8_valid(h + pos, remark))
        return 0;
    pos += remark;
    if (get_i32(h + pos) != n - pos - 4)
        return 0;
    pos += 4;
    while (pos < n) {
        if (n - pos < 2)
            return 0;
        Py_ssize_t key_len = get_i16(h + pos);
        pos += 2;
        if (key_len < 0 || n - pos < key_len + 4 || !utf8_valid(h + pos, key_len))
            return 0;
        const unsigned char *key = h + pos;
        pos += key_len;
        Py_ssize_t value_len = get_i32(h + pos);
        pos += 4;
        if (value_len < 0 || n - pos < value_len || !utf8_valid(h + pos, value_len))
            return 0;
        Span value = {h + pos, value_len};
        if (!keep_field(r, key, key_len, value))
            return 0;
        pos += value_len;
    }
    return 1;
}

/* -- the frame -------------------------------------------------------------------------------- */

/*
 * The frame at ``p`` (``avail`` bytes there): FRAME_PARTIAL, FRAME_DECLINED, or FRAME_READY with
 * ``*frame_size`` (length word included) and ``r`` read. ``scratch`` holds at least ``avail``
 * bytes (unescaped JSON strings).
 */
int read_frame(const unsigned char *p, Py_ssize_t avail, Py_ssize_t max_frame_size,
                      unsigned char *scratch, WireRequest *r, Py_ssize_t *frame_size)
{
    if (avail < 4)
        return FRAME_PARTIAL;
    int32_t total = get_i32(p);
    if (total < 4 || total > max_frame_size)
        return FRAME_DECLINED;  /* the Python decoder refuses it and closes the connection */
    if (avail - 4 < total)
        return FRAME_PARTIAL;
    uint32_t mixed = (uint32_t)get_i32(p + 4);
    Py_ssize_t header_len = mixed & HEADER_LENGTH_MASK;
    if (header_len > total - 4)
        return FRAME_DECLINED;
    memset(r, 0, offsetof(WireRequest, ext_key));
    r->serialize_type = (int)(mixed >> 24);
    const unsigned char *header = p + 8;
    int ok = r->serialize_type == SERIALIZE_JSON ? read_json_header(header, header_len, scratch, r)
           : r->serialize_type == SERIALIZE_ROCKETMQ ? read_binary_header(header, header_len, r)
           : 0;
    if (!ok)
        return FRAME_DECLINED;
    r->body = header + header_len;
    r->body_len = total - 4 - header_len;
    *frame_size = 4 + (Py_ssize_t)total;
    return FRAME_READY;
}

/* -- numbers in text values ------------------------------------------------------------------ */

/* Decimal digits with an optional '-', in [low, high]. */
int span_int(Span s, int64_t low, int64_t high, int64_t *out)
{
    if (s.p == NULL || s.len == 0 || s.len > 19)
        return 0;
    Py_ssize_t i = s.p[0] == '-' ? 1 : 0;
    if (i == s.len)
        return 0;
    uint64_t v = 0;
    for (; i < s.len; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s.p[i] - '0');
        if (v > (uint64_t)INT64_MAX)
            return 0;
    }
    int64_t sv = s.p[0] == '-' ? -(int64_t)v : (int64_t)v;
    if (sv < low || sv > high)
        return 0;
    *out = sv;
    return 1;
}

/* An optional number: absent or empty is ``dflt``. */
int span_opt_int(Span s, int64_t dflt, int64_t low, int64_t high, int64_t *out)
{
    if (s.p == NULL || s.len == 0) {
        *out = dflt;
        return 1;
    }
    return span_int(s, low, high, out);
}
