// json_schema_int.c - the GBNF text accepting exactly the integers in [min, max] (json_schema_impl.h), a schema's
// "minimum" / "maximum" / "exclusiveMinimum" / "exclusiveMaximum" on an "integer": llama.cpp's digit-range
// construction (its _build_min_max_int), alternatives by digit count, then digit by digit within one count, with an
// unbounded side capped at a given number of digits.
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_impl.h"

// The digits from..to as one character class.
static void digit_range(sb *o, char from, char to) {
    if (from == to) sb_printf(o, "[%c]", from);
    else sb_printf(o, "[%c-%c]", from, to);
}

// [0-9] repeated mn..mx times.
static void more_digits(sb *o, int mn, int mx) {
    sb_puts(o, "[0-9]");
    if (mn == 1 && mx == 1) return;
    if (mn == mx) sb_printf(o, "{%d}", mn);
    else sb_printf(o, "{%d,%d}", mn, mx);
}

// Whether s[0..n) is all ch.
static bool all_of_char(const char *s, size_t n, char ch) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ch) return false;
    return true;
}

// The numbers from..to, both n digits (leading zeros kept), digit by digit.
static void uniform_range(sb *o, const char *from, const char *to, size_t n) {
    size_t i = 0;
    while (i < n && from[i] == to[i]) i++;
    if (i) {
        sb_putc(o, '"');
        sb_putn(o, from, i);
        sb_putc(o, '"');
    }
    if (i == n) return;
    if (i) sb_putc(o, ' ');
    const size_t rest = n - i - 1;
    if (!rest) {
        sb_printf(o, "[%c-%c]", from[i], to[i]);
        return;
    }
    static const char Z[] = "0000000000000000000000", N[] = "9999999999999999999999";
    const char *fs = from + i + 1, *ts = to + i + 1;
    bool to_done = false;
    sb_putc(o, '(');
    if (all_of_char(fs, rest, '0')) {
        digit_range(o, from[i], (char)(to[i] - 1));
        sb_putc(o, ' ');
        more_digits(o, (int)rest, (int)rest);
    } else {
        sb_printf(o, "[%c] (", from[i]);
        uniform_range(o, fs, N, rest);
        sb_putc(o, ')');
        if (from[i] < to[i] - 1) {
            sb_puts(o, " | ");
            to_done = all_of_char(ts, rest, '9');
            digit_range(o, (char)(from[i] + 1), to_done ? to[i] : (char)(to[i] - 1));
            sb_putc(o, ' ');
            more_digits(o, (int)rest, (int)rest);
        }
    }
    if (!to_done) {
        sb_puts(o, " | ");
        digit_range(o, to[i], to[i]);
        sb_putc(o, ' ');
        uniform_range(o, Z, ts, rest);
    }
    sb_putc(o, ')');
}

// Integers in [mn, mx] (INT64_MIN / INT64_MAX: unbounded on that side), llama.cpp's construction: at most `dec`
// digits on an unbounded side; below the top level a leading zero may follow a fixed first digit.
void kvt_js_int_range(sb *o, int64_t mn, int64_t mx, int dec, bool top) {
    const bool hmin = mn != INT64_MIN, hmax = mx != INT64_MAX;
    const int less = dec - 1 > 1 ? dec - 1 : 1;
    if (hmin && hmax) {
        if (mn < 0 && mx < 0) {
            sb_puts(o, "\"-\" (");
            kvt_js_int_range(o, -mx, -mn, dec, true);
            sb_putc(o, ')');
            return;
        }
        if (mn < 0) {
            sb_puts(o, "\"-\" (");
            kvt_js_int_range(o, 0, -mn, dec, true);
            sb_puts(o, ") | ");
            mn = 0;
        }
        char a[24], b[24], nines[24];
        snprintf(a, sizeof a, "%lld", (long long)mn);
        snprintf(b, sizeof b, "%lld", (long long)mx);
        for (size_t d = strlen(a); d < strlen(b); d++) {
            memset(nines, '9', d);
            uniform_range(o, a, nines, d);
            a[0] = '1';
            memset(a + 1, '0', d);
            a[d + 1] = 0;
            sb_puts(o, " | ");
        }
        uniform_range(o, a, b, strlen(b));
        return;
    }
    if (hmin) {
        if (mn < 0) {
            sb_puts(o, "\"-\" (");
            kvt_js_int_range(o, INT64_MIN, -mn, dec, false);
            sb_puts(o, ") | [0] | [1-9] ");
            more_digits(o, 0, dec - 1);
        } else if (mn == 0) {
            if (top) {
                sb_puts(o, "[0] | [1-9] ");
                more_digits(o, 0, less);
            } else more_digits(o, 1, dec);
        } else if (mn <= 9) {
            const char ch = (char)('0' + mn), start = top ? '1' : '0';
            if (ch > start) {
                digit_range(o, start, (char)(ch - 1));
                sb_putc(o, ' ');
                more_digits(o, 1, less);
                sb_puts(o, " | ");
            }
            digit_range(o, ch, '9');
            sb_putc(o, ' ');
            more_digits(o, 0, less);
        } else {
            char s[24];
            snprintf(s, sizeof s, "%lld", (long long)mn);
            const int len = (int)strlen(s);
            const char ch = s[0];
            if (ch > '1') {
                digit_range(o, top ? '1' : '0', (char)(ch - 1));
                sb_putc(o, ' ');
                more_digits(o, len, less);
                sb_puts(o, " | ");
            }
            digit_range(o, ch, ch);
            sb_puts(o, " (");
            kvt_js_int_range(o, strtoll(s + 1, NULL, 10), INT64_MAX, less, false);
            sb_putc(o, ')');
            if (ch < '9') {
                sb_puts(o, " | ");
                digit_range(o, (char)(ch + 1), '9');
                sb_putc(o, ' ');
                more_digits(o, len - 1, less);
            }
        }
        return;
    }
    if (mx >= 0) {
        if (top) {
            sb_puts(o, "\"-\" [1-9] ");
            more_digits(o, 0, less);
            sb_puts(o, " | ");
        }
        kvt_js_int_range(o, 0, mx, dec, true);
    } else {
        sb_puts(o, "\"-\" (");
        kvt_js_int_range(o, -mx, INT64_MAX, dec, false);
        sb_putc(o, ')');
    }
}
