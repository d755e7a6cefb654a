// timer.h - monotonic wall clock and thread CPU time.
#ifndef KVT_TIMER_H
#define KVT_TIMER_H
#include <stdint.h>
// Nanoseconds since an arbitrary epoch (CLOCK_MONOTONIC).
int64_t kvt_time_ns(void);
static inline double kvt_time_ms(void) { return (double)kvt_time_ns() / 1e6; }
// CPU time of the calling thread in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
int64_t kvt_thread_cpu_ns(void);
// Sorts n timings (or rates) ascending, for medians and best-ofs.
void kvt_sort_f64(double *v, int64_t n);
// The median of v[0..n) (sorts v; the mean of the two middle values for even n); 0 for n <= 0.
double kvt_median_f64(double *v, int64_t n);
#endif
