/*
 * json.h: a small streaming JSON writer for --json output.
 */
#ifndef DCP_CLI_JSON_H
#define DCP_CLI_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 32

/** Writer state: tracks nesting to place commas and indentation. */
struct json_writer {
    FILE *out;
    int depth;
    bool first[JSON_MAX_DEPTH]; ///< No member written yet at this depth.
    bool after_key;             ///< A key was just written; the value follows on the same line.
};

void json_init(struct json_writer *w, FILE *out);
void json_begin_object(struct json_writer *w);
void json_end_object(struct json_writer *w);
void json_begin_array(struct json_writer *w);
void json_end_array(struct json_writer *w);
/** Writes "key": ; the next call writes its value. */
void json_key(struct json_writer *w, const char *key);
void json_string(struct json_writer *w, const char *s); ///< NULL writes null.
void json_number(struct json_writer *w, double v);      ///< Non-finite writes null.
void json_uint(struct json_writer *w, uint64_t v);
void json_int(struct json_writer *w, int64_t v);
void json_bool(struct json_writer *w, bool v);
void json_null(struct json_writer *w);
/**
 * Writes text, a complete JSON value formatted with two-space indentation from
 * depth 0 (dcp_deployment_to_json), as the next value, its lines indented to
 * the current depth.
 */
void json_raw(struct json_writer *w, const char *text);
/** Ends the document with a newline. */
void json_finish(struct json_writer *w);

/* key + value in one call */
void json_kv_string(struct json_writer *w, const char *key, const char *s);
void json_kv_number(struct json_writer *w, const char *key, double v);
void json_kv_uint(struct json_writer *w, const char *key, uint64_t v);
void json_kv_int(struct json_writer *w, const char *key, int64_t v);
void json_kv_bool(struct json_writer *w, const char *key, bool v);

#endif /* DCP_CLI_JSON_H */
