// grammar_impl.h - the compiled grammar shared by the parser (grammar_parse.c) and the matcher (grammar_match.c).
// Not part of the API: only those two files include it.
//
// A compiled grammar is llama.cpp's element form: each rule is a run of elements, alternatives separated by ALT and
// the rule closed by END; a character class is a CHAR or CHAR_NOT followed by CHAR_ALT / CHAR_RNG_UPPER elements. All
// rules sit in one array (el) so that a parse stack is a list of element indices.
#ifndef KVT_GRAMMAR_IMPL_H
#define KVT_GRAMMAR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar.h"

enum {
    GR_END = 0,       // end of a rule
    GR_ALT = 1,       // start of the next alternative
    GR_RULE_REF = 2,  // value: rule id
    GR_CHAR = 3,      // value: code point; starts a class
    GR_CHAR_NOT = 4,  // starts a negated class
    GR_CHAR_RNG = 5,  // the preceding CHAR / CHAR_ALT / CHAR_NOT is the lower end of [lo-value]
    GR_CHAR_ALT = 6,  // one more member of the class
    GR_CHAR_ANY = 7,  // '.'
    GR_TOKEN = 8,     // value: token id
    GR_TOKEN_NOT = 9, // any token but value
};

typedef struct {
    uint32_t type;
    uint32_t value;
} gr_elem;

struct kvt_grammar {
    atomic_int refs;
    gr_elem *el;        // [n_el]: every rule, each closed by GR_END
    int32_t n_el;
    int32_t n_rules;
    int32_t *rule_at;   // [n_rules]: index in el of the rule's first element
    int32_t *alt_first; // [n_rules + 1]: rule r's alternatives are alts[alt_first[r] .. alt_first[r + 1])
    int32_t *alts;      // [n_alts]: index in el of each alternative's first element (END / ALT: empty alternative)
    int32_t *after;     // [n_el]: for a terminal element (class start, '.', token), the index past it; else -1
    int32_t root;
    int64_t max_stacks;
};

static inline bool gr_is_eos(uint32_t type) { return type == GR_END || type == GR_ALT; }
static inline bool gr_is_char_start(uint32_t type) {
    return type == GR_CHAR || type == GR_CHAR_NOT || type == GR_CHAR_ANY;
}
static inline bool gr_is_token(uint32_t type) { return type == GR_TOKEN || type == GR_TOKEN_NOT; }

#endif
