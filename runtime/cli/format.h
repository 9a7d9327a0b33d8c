/*
 * format.h: numbers for people (dcp-run's human-readable output).
 *
 * Each function writes into buf (at least CLI_FMT_LEN bytes) and returns buf, so
 * calls can sit inside a printf argument list. Sizes use decimal units (1 GB =
 * 1e9 B), as GPU datasheets do.
 */
#ifndef DCP_CLI_FORMAT_H
#define DCP_CLI_FORMAT_H

#include <stdint.h>

/** Buffer size every formatter needs. */
#define CLI_FMT_LEN 40

/** An integer with thousands separators: "1,048,576". */
const char *cli_fmt_count(char *buf, uint64_t v);

/** A rounded estimate, 3 significant digits, with separators: "~193,000"; "never" if not finite. */
const char *cli_fmt_approx(char *buf, double v);

/** A size with a decimal unit: "512 B", "4.50 MB", "126.9 GB", "-7.10 GB". */
const char *cli_fmt_bytes(char *buf, double bytes);

/** An exact byte count with separators: "70,272 B"; one decimal if fractional. */
const char *cli_fmt_bytes_exact(char *buf, double bytes);

/** A bandwidth: "4.80 TB/s", "450.0 GB/s". */
const char *cli_fmt_rate(char *buf, double bytes_per_second);

/** A parameter count: "671B", "1.04T", "70.6B". */
const char *cli_fmt_params(char *buf, double params);

/** A duration: "850 ns", "40.5 us", "1.20 ms", "2.00 s". */
const char *cli_fmt_seconds(char *buf, double seconds);

/** A ratio: "8.00x". */
const char *cli_fmt_ratio(char *buf, double ratio);

#endif /* DCP_CLI_FORMAT_H */
