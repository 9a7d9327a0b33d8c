/* format.c: numbers for people. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format.h"

const char *cli_fmt_count(char *buf, uint64_t v)
{
    char digits[24];
    int n = snprintf(digits, sizeof(digits), "%" PRIu64, v);
    char *out = buf;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            *out++ = ',';
        *out++ = digits[i];
    }
    *out = '\0';
    return buf;
}

const char *cli_fmt_approx(char *buf, double v)
{
    if (!isfinite(v)) {
        strcpy(buf, "never");
        return buf;
    }
    /* Keep three significant digits: 193,059.9 -> 193,000; 5,559.9 -> 5,560. */
    double unit = v >= 1000.0 ? pow(10.0, floor(log10(v)) - 2.0) : 1.0;
    double rounded = round(v / unit) * unit;
    buf[0] = '~';
    cli_fmt_count(buf + 1, rounded > 0 ? (uint64_t)rounded : 0);
    return buf;
}

/*
 * Scales |v| by 1000 until it is below 1000 (at most to units[4]) and prints it
 * with two decimals below 10 and one above, or as an integer when it is a whole
 * number of the base unit.
 */
static const char *fmt_scaled(char *buf, double v, const char *const units[5])
{
    double mag = fabs(v);
    int u = 0;
    while (mag >= 1000.0 && u < 4) {
        mag /= 1000.0;
        u++;
    }
    const char *sign = v < 0 ? "-" : "";
    if (u == 0 && mag == floor(mag))
        snprintf(buf, CLI_FMT_LEN, "%s%.0f %s", sign, mag, units[0]);
    else
        snprintf(buf, CLI_FMT_LEN, mag < 10.0 ? "%s%.2f %s" : "%s%.1f %s", sign, mag, units[u]);
    return buf;
}

const char *cli_fmt_bytes(char *buf, double bytes)
{
    static const char *const units[5] = {"B", "KB", "MB", "GB", "TB"};
    return fmt_scaled(buf, bytes, units);
}

const char *cli_fmt_rate(char *buf, double bytes_per_second)
{
    static const char *const units[5] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
    return fmt_scaled(buf, bytes_per_second, units);
}

const char *cli_fmt_bytes_exact(char *buf, double bytes)
{
    if (bytes < 0 || bytes >= 1e18) /* not a byte count this tool produces */
        return cli_fmt_bytes(buf, bytes);
    const double tenths = round(bytes * 10.0);
    const int tenth = (int)fmod(tenths, 10.0);
    cli_fmt_count(buf, (uint64_t)(tenths / 10.0));
    size_t n = strlen(buf);
    if (tenth)
        n += (size_t)snprintf(buf + n, CLI_FMT_LEN - n, ".%d", tenth);
    snprintf(buf + n, CLI_FMT_LEN - n, " B");
    return buf;
}

const char *cli_fmt_params(char *buf, double params)
{
    static const char *const units[] = {"", "K", "M", "B", "T"};
    double v = params;
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, CLI_FMT_LEN, "%.3g%s", v, units[u]);
    return buf;
}

const char *cli_fmt_seconds(char *buf, double seconds)
{
    if (!isfinite(seconds))
        snprintf(buf, CLI_FMT_LEN, "never");
    else if (seconds < 1e-6)
        snprintf(buf, CLI_FMT_LEN, "%.0f ns", seconds * 1e9);
    else if (seconds < 1e-3)
        snprintf(buf, CLI_FMT_LEN, "%.1f us", seconds * 1e6);
    else if (seconds < 1.0)
        snprintf(buf, CLI_FMT_LEN, "%.2f ms", seconds * 1e3);
    else
        snprintf(buf, CLI_FMT_LEN, "%.2f s", seconds);
    return buf;
}

const char *cli_fmt_ratio(char *buf, double ratio)
{
    snprintf(buf, CLI_FMT_LEN, "%.2fx", ratio);
    return buf;
}
