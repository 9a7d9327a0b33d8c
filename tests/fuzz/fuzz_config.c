/*
 * fuzz_config.c: libFuzzer target for the YAML deployment loader.
 *
 * Loads the input as deployment text with a diagnostics list, formats every
 * entry, and checks what must hold for any input: a status agrees with the
 * errors reported, and a deployment the YAML path accepts is accepted again by
 * the struct path (dcp_deployment_from_config) with the same config, and its
 * export (dcp_deployment_to_json) loads back to the same config. Built with
 * -fsanitize=fuzzer, or with driver.c to replay a corpus as a test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/deployment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a finding: stop loudly so the fuzzer saves the input. */
static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_config: invariant broken: %s\n", what);
        abort();
    }
}

static void format_all(const dcp_diag *d)
{
    char small[64];
    for (size_t i = 0; i < dcp_diag_count(d); i++) {
        const struct dcp_diag_entry *e = dcp_diag_get(d, i);
        const int n = dcp_diag_format(e, small, sizeof(small));
        check(n >= 0 && strlen(small) == (size_t)(n < (int)sizeof(small) ? n : (int)sizeof(small) - 1),
              "dcp_diag_format truncates like snprintf");
    }
}

/* The struct path must accept what the YAML path accepted, unchanged. */
static void check_struct_round_trip(const dcp_deployment *dep)
{
    const struct dcp_config *cfg = dcp_deployment_config(dep);
    dcp_deployment *again = NULL;
    check(dcp_deployment_from_config(cfg, NULL, &again) == DCP_OK, "from_config accepts a loaded config");
    const struct dcp_config *c2 = dcp_deployment_config(again);
    check(c2->model.num_kv_heads == cfg->model.num_kv_heads &&
              c2->model.softmax_scale == cfg->model.softmax_scale &&
              c2->parallel.dcp == cfg->parallel.dcp &&
              strcmp(c2->model.name, cfg->model.name) == 0,
          "from_config keeps a loaded config");
    dcp_deployment_destroy(&again);
}

/* The exported settings are a deployment file that loads back to the same config. */
static void check_export_round_trip(const dcp_deployment *dep)
{
    char *text = NULL;
    check(dcp_deployment_to_json(dep, &text) == DCP_OK, "dcp_deployment_to_json succeeds");
    dcp_deployment *again = NULL;
    check(dcp_deployment_load_string("export.json", text, strlen(text), NULL, &again) == DCP_OK,
          "the exported settings load");
    char *text2 = NULL;
    check(dcp_deployment_to_json(again, &text2) == DCP_OK && strcmp(text, text2) == 0,
          "the reloaded settings export to the same text");
    const struct dcp_config *a = dcp_deployment_config(dep), *b = dcp_deployment_config(again);
    check(a->hardware.memory_bytes == b->hardware.memory_bytes &&
              a->hardware.collective_latency == b->hardware.collective_latency &&
              a->model.num_params == b->model.num_params && a->workload.seed == b->workload.seed &&
              a->workload.num_context_lengths == b->workload.num_context_lengths,
          "the exported settings load to the same config");
    free(text2);
    free(text);
    dcp_deployment_destroy(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcp_diag *d = NULL;
    if (dcp_diag_create(&d))
        return 0;
    dcp_deployment *dep = NULL;
    const int status = dcp_deployment_load_string("fuzz.yaml", (const char *)data, size, d, &dep);
    format_all(d);
    if (status == DCP_OK) {
        check(dep != NULL && dcp_diag_error_count(d) == 0, "success means a deployment and no errors");
        check_struct_round_trip(dep);
        check_export_round_trip(dep);
    } else {
        check(dep == NULL, "failure leaves no deployment");
        check(status != DCP_ECONFIG || dcp_diag_error_count(d) > 0, "DCP_ECONFIG comes with errors");
    }
    dcp_deployment_destroy(&dep);
    dcp_diag_destroy(&d);
    return 0;
}
