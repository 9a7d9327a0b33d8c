/* perf_inputs.c: the performance model's inputs on the command line (perf_inputs.h). */
#include "perf_inputs.h"

#include <string.h>

#include "cli.h"

void cli_perf_opts_init(struct cli_perf_opts *o) { memset(o, 0, sizeof(*o)); }

int cli_perf_params(const struct cli_perf_opts *o, const char *command, struct dcp_perf_params *p)
{
    dcp_perf_default_params(p);
    if (o->calibration) {
        dcp_diag *diag = NULL;
        int err = dcp_diag_create(&diag);
        if (!err)
            err = dcp_perf_params_load(o->calibration, diag, p);
        if (err) {
            fprintf(stderr, "dcp-run %s: --calibration %s:\n", command, o->calibration);
            if (diag)
                dcp_diag_print(diag, stderr);
            else
                fprintf(stderr, "%s\n", dcp_last_error());
        }
        dcp_diag_destroy(&diag);
        if (err)
            return err;
    }
    if (o->kv_efficiency > 0) {
        p->kv_efficiency = o->kv_efficiency;
        p->calibrated &= ~(uint32_t)DCP_PERF_CAL_KV;
    }
    if (o->gemm_efficiency > 0)
        p->gemm_efficiency = o->gemm_efficiency;
    if (o->eager)
        p->cuda_graphs = false;
    return DCP_OK;
}

/* One input: its name, value in display units, and where it came from. */
struct input {
    const char *name;
    double value;
    const char *unit;
    const char *source;
};

static int list_inputs(const struct cli_perf_opts *o, const struct dcp_perf_params *p, struct input *in)
{
    const bool cal_kv = p->calibrated & DCP_PERF_CAL_KV, cal_launch = p->calibrated & DCP_PERF_CAL_LAUNCH;
    const bool cal_graph = p->calibrated & DCP_PERF_CAL_GRAPH;
    int n = 0;
    in[n++] = (struct input){"weight_efficiency", p->weight_efficiency, "", "default"};
    in[n++] = (struct input){"kv_efficiency", p->kv_efficiency, "",
                             o->kv_efficiency > 0 ? "option" : cal_kv ? "calibration" : "default"};
    in[n++] = (struct input){"attention_call_us", p->attention_call * 1e6, " us", cal_kv ? "calibration" : "default"};
    in[n++] = (struct input){"gemm_efficiency", p->gemm_efficiency, "", o->gemm_efficiency > 0 ? "option" : "default"};
    in[n++] = (struct input){"attention_efficiency", p->attention_efficiency, "", "default"};
    in[n++] = (struct input){"link_efficiency", p->link_efficiency, "", "default"};
    in[n++] = (struct input){"hop_latency_us", p->hop_latency * 1e6, " us", "default"};
    in[n++] = (struct input){"eager_collective_us", p->eager_collective * 1e6, " us", "default"};
    in[n++] = (struct input){"oneshot_latency_us", p->oneshot_latency * 1e6, " us", "default"};
    in[n++] = (struct input){"kernels_per_layer", p->kernels_per_layer, "", "default"};
    in[n++] = (struct input){"kernel_gap_graph_us", p->kernel_gap_graph * 1e6, " us", cal_graph ? "calibration" : "default"};
    in[n++] = (struct input){"kernel_gap_eager_us", p->kernel_gap_eager * 1e6, " us", cal_launch ? "calibration" : "default"};
    in[n++] = (struct input){"cuda_graphs", p->cuda_graphs, "", o->eager ? "option" : "default"};
    /* Collective fits are listed apart (cli_perf_print_inputs, collective_fits in JSON). */
    return n;
}

void cli_perf_print_inputs(const struct cli_perf_opts *o, const struct dcp_perf_params *p, FILE *out)
{
    struct input in[16];
    const int n = list_inputs(o, p, in);
    static const char *const sources[3] = {"calibration", "option", "default"};
    for (int s = 0; s < 3; s++) {
        int shown = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(in[i].source, sources[s]))
                continue;
            if (!shown++) {
                if (s == 0)
                    fprintf(out, "model inputs calibrated (%s, on %s):", o->calibration, p->calibrated_on);
                else
                    fprintf(out, "model inputs %s:", s == 1 ? "set by options" : "at their defaults (docs/plan.md)");
            } else {
                fputc(',', out);
            }
            fprintf(out, " %s %.3g%s", in[i].name, in[i].value, in[i].unit);
        }
        for (uint32_t f = 0; s == 0 && f < p->num_collective_fits; f++) {
            const struct dcp_perf_collective_fit *c = &p->collective_fits[f];
            if (!shown++)
                fprintf(out, "model inputs calibrated (%s, on %s):", o->calibration, p->calibrated_on);
            else
                fputc(',', out);
            fprintf(out, " %s x%u %.3g us + bytes / %.3g GB/s", dcp_plan_comm_kind_name(c->kind), c->ranks,
                    c->alpha * 1e6, c->beta / 1e9);
        }
        if (shown)
            fputc('\n', out);
    }
}

void cli_perf_json_inputs(struct json_writer *w, const struct cli_perf_opts *o, const struct dcp_perf_params *p)
{
    struct input in[16];
    const int n = list_inputs(o, p, in);
    json_kv_string(w, "calibration", o->calibration);
    json_kv_string(w, "calibrated_on", o->calibration ? p->calibrated_on : NULL);
    json_key(w, "perf_inputs");
    json_begin_object(w);
    for (int i = 0; i < n; i++) {
        json_key(w, in[i].name);
        json_begin_object(w);
        json_kv_number(w, "value", in[i].value);
        json_kv_string(w, "source", in[i].source);
        json_end_object(w);
    }
    json_end_object(w);
    json_key(w, "collective_fits");
    json_begin_array(w);
    for (uint32_t f = 0; f < p->num_collective_fits; f++) {
        const struct dcp_perf_collective_fit *c = &p->collective_fits[f];
        json_begin_object(w);
        json_kv_string(w, "kind", dcp_plan_comm_kind_name(c->kind));
        json_kv_uint(w, "ranks", c->ranks);
        json_kv_string(w, "link", dcp_perf_link_name(c->link));
        json_kv_number(w, "alpha_seconds", c->alpha);
        json_kv_number(w, "beta_bytes_per_s", c->beta);
        json_end_object(w);
    }
    json_end_array(w);
}
