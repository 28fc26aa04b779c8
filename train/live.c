// train/live.c: the live line (live.h): "\r", the text and "erase to the end of the line" on a
// terminal, at most every LIVE_EVERY_S; the rate and the time left from the steps this run has done.
#include <stdio.h>
#include "base/util.h"
#include "train/live.h"

void live_init(Live *l, int on, int start) {
    *l = (Live){.on = on, .start = start, .t0 = now_sec()};
    l->t_last = l->t0;
}

// "1:05:09", "4:09" or "12 s"
static void duration(double s, char *out, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
    else snprintf(out, n, "%ld s", t);
}

void live_step(Live *l, int step, long long steps, int epochs, long long steps_per_epoch, double rows_per_step) {
    double now = now_sec();
    if (!l->on || now - l->t_last < LIVE_EVERY_S || step + 1 >= steps) return;
    int done = step + 1 - l->start;
    double per_step = (now - l->t0) / done;
    char where[96], left[32];
    if (epochs)
        snprintf(where, sizeof where, "epoch %lld/%d | step %lld/%lld of the epoch", (step + 1) / steps_per_epoch + 1,
                 epochs, (step + 1) % steps_per_epoch, steps_per_epoch);
    else snprintf(where, sizeof where, "step %d/%lld", step + 1, steps);
    duration(per_step * (double)(steps - step - 1), left, sizeof left);
    char rate[32];
    printf("\r%s | %s samples/s | %s left\033[K", where, fmt_si(rows_per_step / per_step, rate, sizeof rate), left);
    fflush(stdout);
    l->shown = 1;
    l->t_last = now;
}

void live_clear(Live *l) {
    if (!l->shown) return;
    printf("\r\033[K");
    l->shown = 0;
    l->t_last = now_sec();
}
