/* trace.c: request traces: Mooncake JSONL and one-length-per-line files (strictly
 * checked, every error with its line), a synthetic agentic trace, and JSONL output. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/serve.h"
#include "dcp/tools.h"
#include "util/file.h"
#include "util/util.h"

/* ---- building a trace --------------------------------------------------------- */

struct builder {
    struct dcp_trace *t;
    size_t req_cap, off_cap;
    size_t hash_count, hash_cap;
    uint64_t *hash_offset; /* [req_cap] where each request's hashes start in hash_storage */
    const char *name;      /* for messages */
    const char *fewer;     /* how to ask for fewer requests */
    uint64_t max_bytes;    /* memory the requests and hash ids may take */
};

/* Memory one request takes besides its hash ids: its record and its hash offset. */
#define REQUEST_BYTES (sizeof(struct dcp_serve_request) + sizeof(uint64_t))

/* Refuses a trace that would exceed the request count or memory cap with requests
 * requests and hashes hash ids: a trace must not take memory without bound (a 20 MB
 * file of one-token lines made 10 million requests). */
static int builder_check(const struct builder *b, uint64_t requests, uint64_t hashes)
{
    if (requests > DCP_TRACE_MAX_REQUESTS)
        return dcp_error(DCP_ECONFIG, "%s: more than %u requests (the most a trace may hold); %s", b->name,
                         DCP_TRACE_MAX_REQUESTS, b->fewer);
    const uint64_t bytes = requests * REQUEST_BYTES + hashes * sizeof(uint64_t);
    if (bytes > b->max_bytes)
        return dcp_error(DCP_ENOMEM, "%s: its first %" PRIu64 " requests with %" PRIu64 " hash ids take more than "
                         "the %.4g MiB a trace may take in memory (max_memory_bytes); %s", b->name, requests, hashes,
                         (double)b->max_bytes / (1 << 20), b->fewer);
    return DCP_OK;
}

static int builder_init(struct builder *b, const char *name, const char *format, uint32_t hash_block_tokens,
                        uint64_t max_bytes)
{
    memset(b, 0, sizeof(*b));
    b->name = name;
    b->fewer = strcmp(format, "synthetic") ? "read fewer (options.limit, dcp-run --limit)"
                                           : "generate fewer (requests, dcp-run replay --synthetic or --limit)";
    b->max_bytes = max_bytes ? max_bytes : DCP_TRACE_MAX_MEMORY_BYTES;
    b->t = calloc(1, sizeof(*b->t));
    if (!b->t)
        return dcp_error(DCP_ENOMEM, "trace");
    snprintf(b->t->format, sizeof(b->t->format), "%s", format);
    b->t->hash_block_tokens = hash_block_tokens;
    return DCP_OK;
}

/* Appends a request whose hashes are the last n entries pushed by push_hash(). */
static int builder_add(struct builder *b, double arrival, uint64_t prompt, uint32_t output, uint32_t nhash)
{
    int st = builder_check(b, (uint64_t)b->t->count + 1, b->hash_count);
    if (st)
        return st;
    if (dcp_grow_array((void **)&b->t->requests, &b->req_cap, (size_t)b->t->count + 1, sizeof(*b->t->requests)) ||
        dcp_grow_array((void **)&b->hash_offset, &b->off_cap, (size_t)b->t->count + 1, sizeof(*b->hash_offset)))
        return dcp_error(DCP_ENOMEM, "trace: %u requests", b->t->count + 1);
    b->hash_offset[b->t->count] = b->hash_count - nhash;
    b->t->requests[b->t->count++] = (struct dcp_serve_request){
        .arrival = arrival, .prompt_tokens = prompt, .output_tokens = output, .num_hashes = nhash,
        .hash_block_tokens = b->t->hash_block_tokens,
    };
    return DCP_OK;
}

static int push_hash(struct builder *b, uint64_t h)
{
    int st = builder_check(b, (uint64_t)b->t->count + 1, (uint64_t)b->hash_count + 1);
    if (st)
        return st;
    if (dcp_grow_array((void **)&b->t->hash_storage, &b->hash_cap, b->hash_count + 1, sizeof(uint64_t)))
        return dcp_error(DCP_ENOMEM, "trace: %zu hash ids", b->hash_count + 1);
    b->t->hash_storage[b->hash_count++] = h;
    return DCP_OK;
}

/* Points every request at its hashes (storage no longer moves) and hands the trace out. */
static struct dcp_trace *builder_finish(struct builder *b)
{
    for (uint32_t i = 0; i < b->t->count; i++)
        b->t->requests[i].hashes = b->t->requests[i].num_hashes ? b->t->hash_storage + b->hash_offset[i] : NULL;
    free(b->hash_offset);
    struct dcp_trace *t = b->t;
    memset(b, 0, sizeof(*b));
    return t;
}

static void builder_abort(struct builder *b)
{
    free(b->hash_offset);
    dcp_trace_destroy(&b->t);
    memset(b, 0, sizeof(*b));
}

void dcp_trace_destroy(struct dcp_trace **pt)
{
    struct dcp_trace *t = pt ? *pt : NULL;
    if (!t)
        return;
    free(t->requests);
    free(t->hash_storage);
    free(t);
    *pt = NULL;
}

/* ---- a strict parser for flat JSON objects ------------------------------------ */

/* One line being parsed. */
struct jcur {
    const char *p, *end;
    const char *name;
    uint64_t line;
};

static int jerr(const struct jcur *c, const char *fmt, const char *what)
{
    return dcp_error(DCP_ECONFIG, "%s:%" PRIu64 ": %s%s", c->name, c->line, fmt, what ? what : "");
}

static void jws(struct jcur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

static bool jeat(struct jcur *c, char ch)
{
    jws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A JSON string without escapes other than \" \\ \/ (keys we know never need them);
 * copies at most cap - 1 bytes into out (longer keys are still consumed). */
static int jstring(struct jcur *c, char *out, size_t cap)
{
    if (!jeat(c, '"'))
        return jerr(c, "expected a string", NULL);
    size_t n = 0;
    while (c->p < c->end && *c->p != '"') {
        char ch = *c->p++;
        if ((unsigned char)ch < 0x20)
            return jerr(c, "control character in a string", NULL);
        if (ch == '\\') {
            if (c->p >= c->end)
                break;
            ch = *c->p++;
            if (ch == 'u') {
                if (c->end - c->p < 4)
                    return jerr(c, "bad \\u escape", NULL);
                c->p += 4;
                ch = '?';
            } else if (!strchr("\"\\/bfnrt", ch)) {
                return jerr(c, "bad escape in a string", NULL);
            }
        }
        if (n + 1 < cap)
            out[n++] = ch;
    }
    if (c->p >= c->end)
        return jerr(c, "unterminated string", NULL);
    c->p++;
    if (cap)
        out[n] = '\0';
    return DCP_OK;
}

/* A JSON number. *integer says whether it had no fraction or exponent; *neg its sign.
 * Integers are returned exactly in *u when they fit 64 bits (else *overflow). */
struct jnum {
    double d;
    uint64_t u;
    bool neg, integer, overflow;
};

static int jnumber(struct jcur *c, struct jnum *n, const char *key)
{
    jws(c);
    memset(n, 0, sizeof(*n));
    const char *s = c->p;
    if (c->p < c->end && *c->p == '-') {
        n->neg = true;
        c->p++;
    }
    const char *digits = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        const unsigned d = (unsigned)(*c->p - '0');
        if (n->u > (UINT64_MAX - d) / 10)
            n->overflow = true;
        else
            n->u = n->u * 10 + d;
        c->p++;
    }
    if (c->p == digits || (c->p - digits > 1 && *digits == '0'))
        return jerr(c, "expected a number for ", key);
    n->integer = true;
    if (c->p < c->end && *c->p == '.') {
        n->integer = false;
        const char *f = ++c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
            c->p++;
        if (c->p == f)
            return jerr(c, "bad number for ", key);
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        n->integer = false;
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        const char *e = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
            c->p++;
        if (c->p == e)
            return jerr(c, "bad number for ", key);
    }
    char buf[64];
    const size_t len = (size_t)(c->p - s);
    if (len >= sizeof(buf))
        return jerr(c, "number too long for ", key);
    memcpy(buf, s, len);
    buf[len] = '\0';
    n->d = strtod(buf, NULL);
    if (!isfinite(n->d))
        return jerr(c, "number out of range for ", key);
    return DCP_OK;
}

/* Skips a scalar value of a key we do not use (strings, numbers, true/false/null,
 * arrays of scalars). Objects are refused: the records are flat. */
static int jskip(struct jcur *c, const char *key, int depth)
{
    jws(c);
    if (c->p >= c->end)
        return jerr(c, "missing value for ", key);
    const char ch = *c->p;
    if (ch == '"') {
        char tmp[2];
        return jstring(c, tmp, sizeof(tmp));
    }
    if (ch == '[' && depth == 0) {
        c->p++;
        if (jeat(c, ']'))
            return DCP_OK;
        do {
            int st = jskip(c, key, 1);
            if (st)
                return st;
        } while (jeat(c, ','));
        return jeat(c, ']') ? DCP_OK : jerr(c, "expected ',' or ']' in the array of ", key);
    }
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < DCP_ARRAY_SIZE(words); i++) {
        const size_t l = strlen(words[i]);
        if ((size_t)(c->end - c->p) >= l && !memcmp(c->p, words[i], l)) {
            c->p += l;
            return DCP_OK;
        }
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        struct jnum n;
        return jnumber(c, &n, key);
    }
    return jerr(c, "unsupported value (nested objects or arrays) for ", key);
}

/* ---- Mooncake JSONL ---------------------------------------------------------- */

struct parse_ctx {
    const struct dcp_trace_options *o;
    double length_scale, time_scale;
    struct builder b;
    double last_ms;
};

/* A non-negative integer field within max. */
static int field_uint(struct jcur *c, const char *key, uint64_t max, uint64_t *out)
{
    struct jnum n;
    int st = jnumber(c, &n, key);
    if (st)
        return st;
    if (n.neg && (n.u || !n.integer))
        return jerr(c, "negative value for ", key);
    if (!n.integer)
        return jerr(c, "expected a whole number for ", key);
    if (n.overflow || n.u > max) {
        char why[96];
        snprintf(why, sizeof(why), "%s (%.3g > %" PRIu64 ")", key, n.d, max);
        return jerr(c, "value too large for ", why);
    }
    *out = n.u;
    return DCP_OK;
}

static int parse_hashes(struct jcur *c, struct parse_ctx *x, uint32_t *count)
{
    *count = 0;
    if (!jeat(c, '['))
        return jerr(c, "expected an array for ", "hash_ids");
    if (jeat(c, ']'))
        return DCP_OK;
    do {
        uint64_t h;
        int st = field_uint(c, "hash_ids", UINT64_MAX, &h);
        if (st)
            return st;
        if (*count == DCP_TRACE_MAX_HASHES)
            return jerr(c, "too many entries in ", "hash_ids");
        if ((st = push_hash(&x->b, h)))
            return st;
        ++*count;
    } while (jeat(c, ','));
    return jeat(c, ']') ? DCP_OK : jerr(c, "expected ',' or ']' in ", "hash_ids");
}

enum { F_TIME = 1, F_IN = 2, F_OUT = 4, F_HASH = 8 };

static int parse_json_line(struct parse_ctx *x, struct jcur *c)
{
    if (!jeat(c, '{'))
        return jerr(c, "expected a JSON object '{'", NULL);
    unsigned seen = 0;
    double ms = 0;
    uint64_t in = 0, out = 0;
    uint32_t nhash = 0;
    int st = DCP_OK;
    if (!jeat(c, '}')) {
        do {
            char key[32];
            if ((st = jstring(c, key, sizeof(key))))
                return st;
            if (!jeat(c, ':'))
                return jerr(c, "expected ':' after ", key);
            unsigned bit = !strcmp(key, "timestamp") ? F_TIME : !strcmp(key, "input_length") ? F_IN
                         : !strcmp(key, "output_length") ? F_OUT : !strcmp(key, "hash_ids") ? F_HASH : 0;
            if (bit & seen)
                return jerr(c, "duplicate key ", key);
            seen |= bit;
            if (bit == F_TIME) {
                struct jnum n;
                if ((st = jnumber(c, &n, key)))
                    return st;
                if (n.neg && n.d != 0)
                    return jerr(c, "negative value for ", key);
                if (n.d > 1e12)
                    return jerr(c, "value too large for ", "timestamp (> 1e12 ms)");
                ms = n.d;
            } else if (bit == F_IN) {
                st = field_uint(c, key, DCP_TRACE_MAX_TOKENS, &in);
            } else if (bit == F_OUT) {
                st = field_uint(c, key, UINT32_MAX, &out);
            } else if (bit == F_HASH) {
                st = parse_hashes(c, x, &nhash);
            } else {
                st = jskip(c, key, 0);
            }
            if (st)
                return st;
        } while (jeat(c, ','));
        if (!jeat(c, '}'))
            return jerr(c, "expected ',' or '}'", NULL);
    }
    jws(c);
    if (c->p != c->end)
        return jerr(c, "unexpected text after the object", NULL);
    static const char *const names[] = {"timestamp", "input_length", "output_length"};
    for (int i = 0; i < 3; i++)
        if (!(seen & (1u << i)))
            return jerr(c, "missing field ", names[i]);
    if (in == 0 || out == 0)
        return jerr(c, in == 0 ? "input_length must be >= 1" : "output_length must be >= 1", NULL);
    if (ms < x->last_ms) {
        char why[96];
        snprintf(why, sizeof(why), " (%.17g ms after %.17g ms)", ms, x->last_ms);
        return jerr(c, "timestamp goes backwards", why);
    }
    if (nhash > in / 512 + (in % 512 != 0)) {
        char why[96];
        snprintf(why, sizeof(why), " (%u ids for %" PRIu64 " tokens of 512-token blocks)", nhash, in);
        return jerr(c, "more hash_ids than prompt blocks", why);
    }
    x->last_ms = ms;
    const double scaled = llround((double)in * x->length_scale);
    if (scaled > (double)DCP_TRACE_MAX_TOKENS)
        return jerr(c, "input_length too large after --length-scale", NULL);
    return builder_add(&x->b, ms * 1e-3 * x->time_scale, (uint64_t)DCP_MAX(scaled, 1.0), (uint32_t)out, nhash);
}

/* ---- one length per line --------------------------------------------------------- */

static int parse_length_line(struct parse_ctx *x, struct jcur *c)
{
    const char *hash = memchr(c->p, '#', (size_t)(c->end - c->p));
    if (hash)
        c->end = hash;
    jws(c);
    while (c->end > c->p && (c->end[-1] == ' ' || c->end[-1] == '\t' || c->end[-1] == '\r'))
        c->end--;
    if (c->p == c->end)
        return DCP_OK; /* a comment or blank line: not a request */
    uint64_t v;
    int st = field_uint(c, "the context length", DCP_TRACE_MAX_TOKENS, &v);
    if (st)
        return st;
    if (c->p != c->end)
        return jerr(c, "expected one context length in tokens per line", NULL);
    if (v == 0)
        return jerr(c, "a context length must be >= 1", NULL);
    const double scaled = llround((double)v * x->length_scale);
    if (scaled > (double)DCP_TRACE_MAX_TOKENS)
        return jerr(c, "context length too large after --length-scale", NULL);
    const double t = (double)x->b.t->count * (x->o->interval > 0 ? x->o->interval : 0) * x->time_scale;
    return builder_add(&x->b, t, (uint64_t)DCP_MAX(scaled, 1.0), x->o->output_tokens ? x->o->output_tokens : 128, 0);
}

/* ---- entry points -------------------------------------------------------------------- */

static int check_options(const struct dcp_trace_options *o, double *ls, double *ts)
{
    *ls = o->length_scale > 0 ? o->length_scale : 1.0;
    *ts = o->time_scale > 0 ? o->time_scale : 1.0;
    if (!isfinite(o->length_scale) || o->length_scale < 0 || !isfinite(o->time_scale) || o->time_scale < 0 ||
        *ls > 1e4 || *ts > 1e6 || !isfinite(o->interval) || o->interval < 0)
        return dcp_error(DCP_EINVAL, "trace: bad options (length_scale %g, time_scale %g, interval %g)",
                         o->length_scale, o->time_scale, o->interval);
    return DCP_OK;
}

int dcp_trace_parse(const char *name, const char *text, size_t len, const struct dcp_trace_options *opts,
                    struct dcp_trace **out)
{
    dcp_clear_error();
    if (!out || (!text && len))
        return dcp_error(DCP_EINVAL, "trace_parse: NULL argument");
    *out = NULL;
    const struct dcp_trace_options none = {0};
    struct parse_ctx x = {.o = opts ? opts : &none};
    int st = check_options(x.o, &x.length_scale, &x.time_scale);
    if (st)
        return st;
    name = name ? name : "<trace>";
    /* A UTF-8 byte order mark (editors on Windows write one) is not content: skipped, so
     * that a JSONL trace is not taken for the lengths format. */
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
        text += 3;
        len -= 3;
    }
    size_t first = 0;
    while (first < len && strchr(" \t\r\n", text[first]))
        first++;
    const bool json = first < len && text[first] == '{';
    const double hb = llround(512.0 * x.length_scale);
    if ((st = builder_init(&x.b, name, json ? "mooncake" : "lengths", (uint32_t)DCP_MAX(hb, 1.0),
                           x.o->max_memory_bytes)))
        return st;
    struct jcur c = {.name = name};
    for (size_t pos = 0; pos < len && !st && (!x.o->limit || x.b.t->count < x.o->limit);) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        const size_t end = nl ? (size_t)(nl - text) : len;
        c.p = text + pos;
        c.end = text + end;
        c.line++;
        if (memchr(c.p, '\0', end - pos))
            st = jerr(&c, "NUL byte in the trace", NULL);
        else if (json) {
            jws(&c);
            if (c.p != c.end)
                st = parse_json_line(&x, &c);
        } else {
            st = parse_length_line(&x, &c);
        }
        pos = end + 1;
    }
    if (!st && x.b.t->count == 0)
        st = dcp_error(DCP_ECONFIG, "%s: the trace holds no requests", name);
    if (st) {
        builder_abort(&x.b);
        return st;
    }
    *out = builder_finish(&x.b);
    return DCP_OK;
}

int dcp_trace_load(const char *path, const struct dcp_trace_options *opts, struct dcp_trace **out)
{
    dcp_clear_error();
    if (!path || !out)
        return dcp_error(DCP_EINVAL, "trace_load: NULL argument");
    *out = NULL;
    const uint64_t cap = opts && opts->max_file_bytes ? opts->max_file_bytes : DCP_TRACE_MAX_FILE_BYTES;
    char *text = NULL;
    size_t len = 0;
    int st = dcp_file_read(path, "trace", (size_t)DCP_MIN(cap, (uint64_t)SIZE_MAX - 1), 0, &text, &len);
    if (st)
        return st;
    st = dcp_trace_parse(path, text, len, opts, out);
    free(text);
    return st;
}

/* ---- synthetic agentic trace ---------------------------------------------------------- */

void dcp_agentic_trace_default_params(struct dcp_agentic_trace_params *p)
{
    *p = (struct dcp_agentic_trace_params){
        .requests = 2000, .rate = 4, .median_input = 67000, .input_sigma = 0.6, .max_input = 250000,
        .median_output = 400, .output_sigma = 0.5, .sessions = 64, .shared_prefix = 8192, .seed = 1,
    };
}

/* splitmix64: a small deterministic generator. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((double)(next_u64(s) >> 11) + 0.5) * 0x1p-53; }

static double lognormal(uint64_t *s, double median, double sigma)
{
    const double u = uniform01(s), v = uniform01(s);
    return median * exp(sigma * sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}

/* One agent session: its current episode's prompt so far and where the episode ends. */
struct session {
    uint64_t prompt;      /* tokens of the last prompt (+ its output) */
    uint64_t target;      /* the episode ends once the prompt passes this */
    uint32_t first_hash;  /* index in the builder's storage of the last prompt's hashes */
    uint32_t num_hashes;
};

static int synth_request(struct builder *b, const struct dcp_agentic_trace_params *p, struct session *se,
                         uint64_t *rng, uint64_t *next_id, double t)
{
    const uint64_t shared_blocks = (uint64_t)(p->shared_prefix / 512);
    const uint64_t cap = p->max_input ? p->max_input : 250000;
    uint64_t prompt;
    uint32_t keep = 0; /* leading hashes reused from the previous turn */
    if (se->prompt == 0 || se->prompt >= se->target) {
        /* A new episode: the shared system prompt plus a task. Episode lengths are spread
         * so that prompts, sampled along growing episodes, have the requested median. */
        se->target = (uint64_t)DCP_MIN(lognormal(rng, 1.3 * p->median_input, p->input_sigma), (double)cap);
        prompt = (uint64_t)(p->shared_prefix + lognormal(rng, 0.25 * p->median_input, p->input_sigma));
        keep = 0;
    } else {
        /* A new turn: the previous prompt and its answer, plus tool output. */
        prompt = se->prompt + (uint64_t)lognormal(rng, 0.08 * p->median_input, 0.8);
        keep = se->num_hashes;
    }
    prompt = DCP_MAX(DCP_MIN(prompt, cap), (uint64_t)1);
    const uint32_t out = (uint32_t)DCP_MAX(1.0, DCP_MIN(lognormal(rng, p->median_output, p->output_sigma), 65536.0));
    const uint64_t full = prompt / 512;
    keep = (uint32_t)DCP_MIN((uint64_t)keep, full);
    const size_t first = b->hash_count;
    for (uint64_t i = 0; i < full + (prompt % 512 != 0) && i < DCP_TRACE_MAX_HASHES; i++) {
        uint64_t h;
        if (i < keep)
            h = b->t->hash_storage[se->first_hash + i];
        else if (i < shared_blocks)
            h = i; /* the system prompt: ids 0.. shared by every session */
        else
            h = (*next_id)++;
        int st = push_hash(b, h);
        if (st)
            return st;
    }
    const uint32_t n = (uint32_t)(b->hash_count - first);
    se->first_hash = (uint32_t)first;
    se->num_hashes = (uint32_t)DCP_MIN((uint64_t)n, full); /* a partial last block is not reused */
    se->prompt = prompt + out;
    return builder_add(b, t, prompt, out, n);
}

int dcp_trace_synthesize(const struct dcp_agentic_trace_params *p, struct dcp_trace **out)
{
    dcp_clear_error();
    if (!p || !out)
        return dcp_error(DCP_EINVAL, "trace_synthesize: NULL argument");
    *out = NULL;
    if (!p->requests || !(p->rate > 0) || !(p->median_input >= 1) || !(p->median_output >= 1) || !p->sessions ||
        !(p->input_sigma >= 0) || !(p->output_sigma >= 0) || !(p->shared_prefix >= 0) ||
        p->median_input > 1e7 || p->sessions > 1000000)
        return dcp_error(DCP_EINVAL, "trace_synthesize: bad parameters");
    if (p->requests > DCP_TRACE_MAX_REQUESTS)
        return dcp_error(DCP_EINVAL, "trace_synthesize: %u requests, more than the %u a trace may hold", p->requests,
                         DCP_TRACE_MAX_REQUESTS);
    struct session *se = calloc(p->sessions, sizeof(*se));
    if (!se)
        return dcp_error(DCP_ENOMEM, "trace_synthesize: %u sessions", p->sessions);
    struct builder b;
    int st = builder_init(&b, "synthetic trace", "synthetic", 512, p->max_memory_bytes);
    uint64_t rng = p->seed, next_id = 1u << 20;
    double t = 0;
    for (uint32_t i = 0; i < p->requests && !st; i++) {
        t += -log(uniform01(&rng)) / p->rate;
        st = synth_request(&b, p, &se[next_u64(&rng) % p->sessions], &rng, &next_id, t);
    }
    free(se);
    if (st) {
        builder_abort(&b);
        return st;
    }
    *out = builder_finish(&b);
    return DCP_OK;
}

int dcp_trace_write_jsonl(const struct dcp_trace *t, const char *path)
{
    dcp_clear_error();
    if (!t || !path)
        return dcp_error(DCP_EINVAL, "trace_write_jsonl: NULL argument");
    FILE *f = fopen(path, "w");
    if (!f)
        return dcp_error(DCP_EIO, "%s: cannot write: %s", path, strerror(errno));
    for (uint32_t i = 0; i < t->count; i++) {
        const struct dcp_serve_request *r = &t->requests[i];
        fprintf(f, "{\"timestamp\": %.0f, \"input_length\": %" PRIu64 ", \"output_length\": %u, \"hash_ids\": [",
                r->arrival * 1e3, r->prompt_tokens, r->output_tokens);
        for (uint32_t j = 0; j < r->num_hashes; j++)
            fprintf(f, "%s%" PRIu64, j ? ", " : "", r->hashes[j]);
        fprintf(f, "]}\n");
    }
    const bool bad = ferror(f);
    if (fclose(f) || bad)
        return dcp_error(DCP_EIO, "%s: write failed", path);
    return DCP_OK;
}
