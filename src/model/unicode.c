// unicode.c - see unicode.h.
#include "unicode.h"

size_t kvt_utf8_len(unsigned char lead) {
    // 0xxx -> 1, 10xx (stray continuation) -> 1, 110x -> 2, 1110 -> 3, 1111 -> 4
    static const unsigned char by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_nibble[lead >> 4];
}

static int is_cont(const char *s, size_t i) {
    return ((unsigned char)s[i] & 0xC0u) == 0x80u;
}

uint32_t kvt_utf8_decode(const char *s, size_t n, size_t *off) {
    size_t i = *off;
    unsigned char b = (unsigned char)s[i];
    if (b < 0x80) {
        *off = i + 1;
        return b;
    }
    size_t need = 0; // continuation bytes
    uint32_t cpt = 0;
    if ((b & 0xE0u) == 0xC0u) {
        need = 1;
        cpt = b & 0x1Fu;
    } else if ((b & 0xF0u) == 0xE0u) {
        need = 2;
        cpt = b & 0x0Fu;
    } else if ((b & 0xF8u) == 0xF0u) {
        need = 3;
        cpt = b & 0x07u;
    } else {
        *off = i + 1; // continuation byte or 0xF8..0xFF as a lead
        return 0xFFFD;
    }
    if (i + need >= n) {
        *off = i + 1;
        return 0xFFFD;
    }
    for (size_t k = 1; k <= need; k++) {
        if (!is_cont(s, i + k)) {
            *off = i + 1;
            return 0xFFFD;
        }
        cpt = (cpt << 6) | ((unsigned char)s[i + k] & 0x3Fu);
    }
    *off = i + need + 1;
    return cpt;
}

size_t kvt_utf8_encode(uint32_t cpt, char *out) {
    if (cpt < 0x80) {
        out[0] = (char)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        out[0] = (char)(0xC0u | (cpt >> 6));
        out[1] = (char)(0x80u | (cpt & 0x3Fu));
        return 2;
    }
    if (cpt < 0x10000) {
        out[0] = (char)(0xE0u | (cpt >> 12));
        out[1] = (char)(0x80u | ((cpt >> 6) & 0x3Fu));
        out[2] = (char)(0x80u | (cpt & 0x3Fu));
        return 3;
    }
    out[0] = (char)(0xF0u | ((cpt >> 18) & 0x07u));
    out[1] = (char)(0x80u | ((cpt >> 12) & 0x3Fu));
    out[2] = (char)(0x80u | ((cpt >> 6) & 0x3Fu));
    out[3] = (char)(0x80u | (cpt & 0x3Fu));
    return 4;
}

uint32_t kvt_ucat(uint32_t cpt) {
    if (cpt < 128) {
        return kvt_ucat_ascii[cpt];
    }
    if (cpt >= 0x110000u) {
        return KVT_UCAT_UNDEFINED;
    }
    // last entry whose first code point <= cpt
    uint32_t lo = 0, hi = kvt_ucat_ranges_n; // answer in [lo, hi)
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((kvt_ucat_ranges[mid] >> 8) <= cpt) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return kvt_ucat_ranges[lo] & 0xFFu;
}

int kvt_uis_space(uint32_t cpt) {
    // White_Space property (PropList.txt)
    if (cpt <= 0x20) {
        return cpt == 0x20 || (cpt >= 0x09 && cpt <= 0x0D);
    }
    if (cpt < 0x85) {
        return 0;
    }
    switch (cpt) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cpt >= 0x2000 && cpt <= 0x200A;
    }
}

uint32_t kvt_uflags(uint32_t cpt) {
    return kvt_ucat(cpt) | (kvt_uis_space(cpt) ? KVT_UFLAG_SPACE : 0);
}

uint32_t kvt_utolower(uint32_t cpt) {
    if (cpt < 128) {
        return (cpt >= 'A' && cpt <= 'Z') ? cpt + 32 : cpt;
    }
    // last run starting at or before cpt
    uint32_t lo = 0, hi = kvt_ulower_runs_n;
    if (hi == 0 || cpt < kvt_ulower_runs[0].first) {
        return cpt;
    }
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (kvt_ulower_runs[mid].first <= cpt) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    const kvt_ulower_run *r = &kvt_ulower_runs[lo];
    uint32_t d = cpt - r->first;
    if (d % r->stride == 0 && d / r->stride < r->count) {
        return (uint32_t)((int32_t)cpt + r->delta);
    }
    return cpt;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC,
// 0xAE..0xFF) stand for themselves; the other 68 bytes, in increasing order,
// take the code points 256, 257, ...
static int byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t kvt_byte_to_cpt(uint8_t b) {
    if (byte_is_printable(b)) {
        return b;
    }
    uint32_t rank = 0; // number of non-printable bytes below b
    for (unsigned x = 0; x < b; x++) {
        rank += !byte_is_printable(x);
    }
    return 256 + rank;
}

int kvt_cpt_to_byte(uint32_t cpt) {
    if (cpt < 256) {
        return byte_is_printable(cpt) ? (int)cpt : -1;
    }
    if (cpt >= 256 + 68) {
        return -1;
    }
    uint32_t want = cpt - 256;
    for (unsigned x = 0; x < 256; x++) {
        if (!byte_is_printable(x)) {
            if (want == 0) {
                return (int)x;
            }
            want--;
        }
    }
    return -1;
}
