#include "timer.h"

#include <stdlib.h>
#include <time.h>

int64_t kvt_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t kvt_thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_f64(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void kvt_sort_f64(double *v, int64_t n) {
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_f64);
}

double kvt_median_f64(double *v, int64_t n) {
    if (n <= 0) return 0;
    kvt_sort_f64(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
