/*
 * fuzz_trace.c: libFuzzer target for the request trace parser (lengths and
 * Mooncake JSONL, dcp_trace_parse()). What must hold for any input: success
 * means at least one request, every length within DCP_TRACE_MAX_TOKENS and
 * arrivals in order; failure leaves no trace and a message naming the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/dcp.h"
#include "dcp/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_trace: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dcp_trace *t = NULL;
    const struct dcp_trace_options o = {.limit = 0};
    const int status = dcp_trace_parse("fuzz.trace", (const char *)data, size, &o, &t);
    if (status == DCP_OK) {
        check(t != NULL && t->count >= 1, "success means at least one request");
        for (uint32_t i = 0; i < t->count; i++) {
            check(t->requests[i].prompt_tokens >= 1 &&
                      t->requests[i].prompt_tokens <= DCP_TRACE_MAX_TOKENS,
                  "prompt lengths within 1..DCP_TRACE_MAX_TOKENS");
            check(i == 0 || t->requests[i].arrival >= t->requests[i - 1].arrival,
                  "arrivals in order");
        }
    } else {
        check(t == NULL, "failure leaves no trace");
        check(status == DCP_ENOMEM || strstr(dcp_last_error(), "fuzz.trace") != NULL,
              "an error names the input");
    }
    dcp_trace_destroy(&t);
    return 0;
}
