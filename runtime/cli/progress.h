/*
 * progress.h: a one-line progress indicator on stderr, shown only on a terminal
 * and only once the work has run for a moment (short work prints nothing).
 */
#ifndef DCP_CLI_PROGRESS_H
#define DCP_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct progress {
    bool enabled;      ///< stderr is a terminal and output is not quiet.
    bool shown;        ///< Something was drawn (needs clearing).
    double start;      ///< When the current task began.
    double last_draw;  ///< When the line was last drawn.
    char label[64];
};

/** Enables the indicator if stderr is a terminal and quiet is false. */
void progress_init(struct progress *p, bool quiet);
/** Starts a new task label ("prefill dcp=4"). */
void progress_begin(struct progress *p, const char *label);
/** Reports done of total; redraws at most ~10 times a second, after 0.5 s. */
void progress_update(struct progress *p, uint64_t done, uint64_t total);
/** Clears the line. */
void progress_end(struct progress *p);

/** Monotonic seconds. */
double cli_now(void);

#endif /* DCP_CLI_PROGRESS_H */
