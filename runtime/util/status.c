/* status.c: status names, the per-thread last-error detail, small helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcp/common.h"
#include "dcp_build_config.h"
#include "util/util.h"

static _Thread_local char last_error[512];

DCP_API const char *dcp_strerror(int status)
{
    switch (status) {
    case DCP_OK: return "success";
    case DCP_EINVAL: return "invalid argument";
    case DCP_ENOMEM: return "out of host memory";
    case DCP_ENOSPC: return "no free KV blocks";
    case DCP_ECONFIG: return "invalid deployment";
    case DCP_EIO: return "input/output error";
    case DCP_ENOTSUP: return "not supported";
    case DCP_ENODRIVER: return "CUDA driver library not loadable";
    case DCP_ESTUBDRIVER: return "CUDA driver is the toolkit stub, not a real driver";
    case DCP_EDRIVERVERSION: return "CUDA driver too old";
    case DCP_ENODEVICE: return "no usable CUDA device";
    case DCP_ECUDA: return "CUDA driver call failed";
    case DCP_ENCCL: return "NCCL error";
    case DCP_EMODULE: return "embedded kernel module corrupt or not loadable";
    case DCP_ETIMEOUT: return "timed out";
    case DCP_ENOENT: return "no such object";
    case DCP_EDEVMEM: return "out of device memory";
    case DCP_EABORTED: return "aborted because another rank failed";
    case DCP_EBUSY: return "rank busy in another call";
    default: return "unknown error";
    }
}

DCP_API const char *dcp_last_error(void) { return last_error; }

DCP_API const char *dcp_version(void) { return DCP_VERSION_STRING; }

/* Formatted aside first: a message may quote the previous one (dcp_last_error() as
 * an argument), which vsnprintf must not read while it overwrites it. */
int dcp_verror(int status, const char *fmt, va_list ap)
{
    char message[sizeof(last_error)];
    vsnprintf(message, sizeof(message), fmt, ap);
    memcpy(last_error, message, sizeof(message));
    return status;
}

int dcp_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dcp_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

void dcp_clear_error(void) { last_error[0] = '\0'; }

char *dcp_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

char *dcp_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

int dcp_grow_array(void **buf, size_t *cap, size_t need, size_t elem_size)
{
    if (need <= *cap)
        return DCP_OK;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem_size)
            return DCP_ENOMEM;
        ncap *= 2;
    }
    void *p = realloc(*buf, ncap * elem_size);
    if (!p)
        return DCP_ENOMEM;
    *buf = p;
    *cap = ncap;
    return DCP_OK;
}

double dcp_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dcp_poll_init(struct dcp_poll *p)
{
    p->spin_until = dcp_now_seconds() + DCP_POLL_SPIN_S;
    p->spins = 0;
    p->pause_ns = DCP_POLL_FIRST_SLEEP_NS;
}

long dcp_poll_pause(struct dcp_poll *p)
{
    if (p->spins < DCP_POLL_SPIN_MAX && dcp_now_seconds() < p->spin_until) {
        p->spins++;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
        return 0;
    }
    p->spins = DCP_POLL_SPIN_MAX; /* spinning never resumes */
    const long slept = p->pause_ns;
    struct timespec ts = {0, slept};
    nanosleep(&ts, NULL);
    if (p->pause_ns < DCP_POLL_MAX_SLEEP_NS)
        p->pause_ns = DCP_MIN(p->pause_ns * 2, DCP_POLL_MAX_SLEEP_NS);
    return slept;
}
