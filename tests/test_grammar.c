// test_grammar.c - GBNF grammars and their matcher (src/sched/grammar.h): llama.cpp's parser vectors (the expanded
// element form compared element by element), its integration vectors (grammar, passing and failing strings) through
// kvt_grammar_match and through the matcher byte by byte and in random pieces, token references over a synthetic
// vocabulary, partial UTF-8 across tokens, the vocabulary filter against a brute-force reference, errors with their
// line and column, the bounds, references and clones, and llama.cpp's own allowed-token sets on the llama-spm vocabulary
// (tests/data/grammar_golden.txt, tools/golden/grammar_golden.py).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/gguf/gguf.h"
#include "../src/model/tokenizer.h"
#include "../src/sched/grammar.h"
#include "../src/sched/grammar_impl.h"
#include "../src/sched/grammar_tok.h"
#include "test.h"
#include "test_rng.h"
#include "test_util.h"

static const char *const llama_parse_failures[] = {
    "\n        root ::= \"a\"{,}\"\n    ",
    "\n        root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}\n    ",
    "\n        root ::= \"a\"{,10}\"\n    ",
    "\n        root ::= \"a\"{5000}\n    ",
    "\n        root ::= \"a\"{5000,}\n    ",
    "\n        root ::= \"a\"{5000,6000}\n    ",
};
// grammar, symbols, elements (type, value), as llama.cpp's tests/test-grammar-parser.cpp lists them
static const struct { const char *src; int n_sym; int n_el; gr_elem el[96]; } llama_parse_cases[] = {
    {"\n        root ::= \"a\"{0,5000}\n    ", 2, 6, {{GR_RULE_REF, 1}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root ::= \"a\"{3,5000}\n    ", 2, 9, {{GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"\n    ", 1, 2, {{GR_CHAR, 'a'}, {GR_END, 0}}},
    {"\n        root  ::= \"a\" | [bdx-z] | [^1-3]\n    ", 1, 10, {{GR_CHAR, 'a'}, {GR_ALT, 0}, {GR_CHAR, 'b'}, {GR_CHAR_ALT, 'd'}, {GR_CHAR_ALT, 'x'}, {GR_CHAR_RNG, 'z'}, {GR_ALT, 0}, {GR_CHAR_NOT, '1'}, {GR_CHAR_RNG, '3'}, {GR_END, 0}}},
    {"\n        root  ::= a+\n        a     ::= \"a\"\n    ", 3, 9, {{GR_RULE_REF, 1}, {GR_RULE_REF, 2}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_END, 0}, {GR_RULE_REF, 1}, {GR_RULE_REF, 2}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"+\n    ", 2, 7, {{GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= a?\n        a     ::= \"a\"\n    ", 3, 7, {{GR_RULE_REF, 2}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_END, 0}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"?\n    ", 2, 5, {{GR_RULE_REF, 1}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= a*\n        a     ::= \"a\"\n    ", 3, 8, {{GR_RULE_REF, 2}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_END, 0}, {GR_RULE_REF, 1}, {GR_RULE_REF, 2}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"*\n    ", 2, 6, {{GR_RULE_REF, 1}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"{2}\n    ", 1, 3, {{GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"{2,}\n    ", 2, 8, {{GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"{ 4}\n    ", 1, 5, {{GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_END, 0}}},
    {"\n        root  ::= \"a\"{2,4}\n    ", 3, 11, {{GR_CHAR, 'a'}, {GR_CHAR, 'a'}, {GR_RULE_REF, 2}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_RULE_REF, 1}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= (expr \"=\" term \"\\n\")+\n        expr  ::= term ([-+*/] term)*\n        term  ::= [0-9]+\n    ", 8, 34, {{GR_RULE_REF, 1}, {GR_RULE_REF, 4}, {GR_END, 0}, {GR_RULE_REF, 2}, {GR_CHAR, '='}, {GR_RULE_REF, 3}, {GR_CHAR, '\n'}, {GR_END, 0}, {GR_RULE_REF, 3}, {GR_RULE_REF, 6}, {GR_END, 0}, {GR_CHAR, '0'}, {GR_CHAR_RNG, '9'}, {GR_RULE_REF, 7}, {GR_END, 0}, {GR_RULE_REF, 1}, {GR_RULE_REF, 4}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, '-'}, {GR_CHAR_ALT, '+'}, {GR_CHAR_ALT, '*'}, {GR_CHAR_ALT, '/'}, {GR_RULE_REF, 3}, {GR_END, 0}, {GR_RULE_REF, 5}, {GR_RULE_REF, 6}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, '0'}, {GR_CHAR_RNG, '9'}, {GR_RULE_REF, 7}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= (expr \"=\" ws term \"\\n\")+\n        expr  ::= term ([-+*/] term)*\n        term  ::= ident | num | \"(\" ws expr \")\" ws\n        ident ::= [a-z] [a-z0-9_]* ws\n        num   ::= [0-9]+ ws\n        ws    ::= [ \\t\\n]*\n    ", 13, 67, {{GR_RULE_REF, 1}, {GR_RULE_REF, 5}, {GR_END, 0}, {GR_RULE_REF, 2}, {GR_CHAR, '='}, {GR_RULE_REF, 3}, {GR_RULE_REF, 4}, {GR_CHAR, '\n'}, {GR_END, 0}, {GR_RULE_REF, 4}, {GR_RULE_REF, 7}, {GR_END, 0}, {GR_RULE_REF, 12}, {GR_END, 0}, {GR_RULE_REF, 8}, {GR_ALT, 0}, {GR_RULE_REF, 9}, {GR_ALT, 0}, {GR_CHAR, '('}, {GR_RULE_REF, 3}, {GR_RULE_REF, 2}, {GR_CHAR, ')'}, {GR_RULE_REF, 3}, {GR_END, 0}, {GR_RULE_REF, 1}, {GR_RULE_REF, 5}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, '-'}, {GR_CHAR_ALT, '+'}, {GR_CHAR_ALT, '*'}, {GR_CHAR_ALT, '/'}, {GR_RULE_REF, 4}, {GR_END, 0}, {GR_RULE_REF, 6}, {GR_RULE_REF, 7}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_CHAR_RNG, 'z'}, {GR_RULE_REF, 10}, {GR_RULE_REF, 3}, {GR_END, 0}, {GR_CHAR, '0'}, {GR_CHAR_RNG, '9'}, {GR_RULE_REF, 11}, {GR_RULE_REF, 3}, {GR_END, 0}, {GR_CHAR, 'a'}, {GR_CHAR_RNG, 'z'}, {GR_CHAR_ALT, '0'}, {GR_CHAR_RNG, '9'}, {GR_CHAR_ALT, '_'}, {GR_RULE_REF, 10}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, '0'}, {GR_CHAR_RNG, '9'}, {GR_RULE_REF, 11}, {GR_ALT, 0}, {GR_END, 0}, {GR_CHAR, ' '}, {GR_CHAR_ALT, '\t'}, {GR_CHAR_ALT, '\n'}, {GR_RULE_REF, 12}, {GR_ALT, 0}, {GR_END, 0}}},
    {"\n        root  ::= <[1000]> !<[1001]> <[1001]>\n    ", 1, 4, {{GR_TOKEN, 1000}, {GR_TOKEN_NOT, 1001}, {GR_TOKEN, 1001}, {GR_END, 0}}},
};

static kvt_grammar *compile(const char *src, kvt_err *err) {
    kvt_grammar *g = NULL;
    if (kvt_grammar_parse(src, strlen(src), NULL, NULL, &g, err) != KVT_OK) return NULL;
    return g;
}

static void test_parser_vectors(void) {
    int bad = 0;
    char why[1024] = "";
    for (size_t c = 0; c < sizeof llama_parse_cases / sizeof llama_parse_cases[0]; c++) {
        kvt_err err = {0};
        kvt_grammar *g = compile(llama_parse_cases[c].src, &err);
        if (!g) {
            if (!bad++) snprintf(why, sizeof why, "case %zu: %s", c, err.msg);
            continue;
        }
        bool same = g->n_rules == llama_parse_cases[c].n_sym && g->n_el == llama_parse_cases[c].n_el;
        for (int i = 0; same && i < g->n_el; i++)
            same = g->el[i].type == llama_parse_cases[c].el[i].type && g->el[i].value == llama_parse_cases[c].el[i].value;
        if (!same && !bad++)
            snprintf(why, sizeof why, "case %zu: %d rules, %d elements (want %d, %d) or an element differs", c,
                     (int)g->n_rules, (int)g->n_el, llama_parse_cases[c].n_sym, llama_parse_cases[c].n_el);
        kvt_grammar_free(g);
    }
    test_result(!bad, "grammar_parse_llama_vectors", "%d of %zu differ: %s", bad,
                sizeof llama_parse_cases / sizeof llama_parse_cases[0], why);
    bad = 0;
    for (size_t c = 0; c < sizeof llama_parse_failures / sizeof llama_parse_failures[0]; c++) {
        kvt_err err = {0};
        kvt_grammar *g = compile(llama_parse_failures[c], &err);
        if (g || err.status != KVT_ERR_INVALID_ARG) {
            if (!bad++) snprintf(why, sizeof why, "case %zu compiled", c);
        }
        kvt_grammar_free(g);
    }
    test_result(!bad, "grammar_parse_llama_failures", "%s", why);
}

// Syntax errors: the message's line, column and words.
static void test_parse_errors(void) {
    static const struct {
        const char *src;
        size_t len; // 0: strlen
        const char *want;
    } v[] = {
        {"root ::= \"abc", 0, "grammar line 1 column 14: unexpected end of input"},
        {"root ::= [a", 0, "grammar line 1 column 12: unexpected end of input"},
        {"root ::= \"a\" )", 0, "grammar line 1 column 14: expecting newline or end"},
        {"\n\nroot := \"a\"", 0, "grammar line 3 column 6: expecting ::="},
        {"root ::= \"\\q\"", 0, "grammar line 1 column 11: unknown escape"},
        {"root ::= \"\\x4\"", 0, "grammar line 1 column 13: expecting 2 hex chars"},
        {"root ::= (\"a\"", 0, "grammar line 1 column 14: expecting ')'"},
        {"root ::= *", 0, "grammar line 1 column 11: expecting preceding item to */+/?/{"},
        {"root ::= \"a\"{2", 0, "grammar line 1 column 15: expecting ','"},
        {"root ::= \"a\"{2,3", 0, "grammar line 1 column 17: expecting '}'"},
        {"root ::= \"a\"{,3}", 0, "grammar line 1 column 14: expecting an int"},
        {"root ::= \"a\"{3,1}", 0, "grammar line 1 column 13: repetition {3,1}: max below min"},
        {"root ::= \"a\"\n::= \"b\"", 0, "grammar line 2 column 1: expecting name"},
        {"root ::= \"a\0\"", 13, "grammar line 1 column 12: NUL byte in grammar text"},
        {"root ::= <|im_end|>", 0, "grammar line 1 column 10: no vocabulary to look up <|...|>"},
        {"root ::= <[99999999999]>", 0, "grammar line 1 column 12: integer out of range"},
        {"root ::= <[12>", 0, "grammar line 1 column 14: expecting ']'"},
        {"root ::= \"a\"{5000}", 0, "grammar line 1 column 13: repetition count 5000 over max_repeat=2000"},
        {"root ::= ([^x]*){0,99}){0,99}", 0, "grammar line 1 column 23: expecting newline or end"},
        {"root ::= (((([^x]*){0,99}){0,99}){0,99})", 0, "repetition copies more than max_repeat=2000 rules"},
        {"root ::= foo\nfoo ::= bar", 0, "undefined rule 'bar'"},
        {"root ::= \"a\" | root \"a\"", 0, "left recursion in rule 'root'"},
        {"rot ::= \"a\"", 0, "no rule 'root'"},
        {"", 0, "grammar has no rules"},
        {"  # only a comment\n", 0, "grammar has no rules"},
    };
    int bad = 0;
    char why[1024] = "";
    for (size_t c = 0; c < sizeof v / sizeof v[0]; c++) {
        kvt_err err = {0};
        kvt_grammar *g = NULL;
        const kvt_status st = kvt_grammar_parse(v[c].src, v[c].len ? v[c].len : strlen(v[c].src), NULL, NULL, &g, &err);
        if (st != KVT_ERR_INVALID_ARG || g || !strstr(err.msg, v[c].want)) {
            if (!bad++) snprintf(why, sizeof why, "case %zu: status %d, '%s' (want '%s')", c, (int)st, err.msg, v[c].want);
        }
        kvt_grammar_free(g);
    }
    test_result(!bad, "grammar_parse_errors", "%d bad: %s", bad, why);

    // nesting: 400 groups deep compile, 600 are refused (no deep recursion either way)
    char *deep = malloc(4000);
    bool ok = deep != NULL;
    for (int depth = 400; ok && depth <= 600; depth += 200) {
        size_t k = 0;
        k += (size_t)sprintf(deep + k, "root ::= ");
        for (int i = 0; i < depth; i++) deep[k++] = '(';
        k += (size_t)sprintf(deep + k, "\"a\"");
        for (int i = 0; i < depth; i++) deep[k++] = ')';
        deep[k] = 0;
        kvt_err err = {0};
        kvt_grammar *g = compile(deep, &err);
        bool m = false;
        if (g) kvt_grammar_match(g, "a", 1, &m, &err);
        ok = depth == 400 ? g && m : !g && strstr(err.msg, "nested more than 512 deep");
        kvt_grammar_free(g);
    }
    free(deep);
    test_result(ok, "grammar_parse_nesting", "400 groups deep must compile, 600 be refused");
}

static bool bytewise(const kvt_grammar *g, const char *s, size_t n, bool *bound) {
    kvt_grammar_state *st;
    kvt_err err;
    *bound = false;
    if (kvt_grammar_state_init(g, &st, &err) != KVT_OK) return *bound = true, false;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) ok = kvt_grammar_state_accept_bytes(st, s + i, 1, &err) == KVT_OK;
    ok = ok && kvt_grammar_state_complete(st);
    kvt_grammar_state_free(st);
    return ok;
}

static bool in_pieces(const kvt_grammar *g, const char *s, size_t n) {
    kvt_grammar_state *st;
    kvt_err err;
    if (kvt_grammar_state_init(g, &st, &err) != KVT_OK) return false;
    bool ok = true;
    for (size_t i = 0; ok && i < n;) {
        size_t k = 1 + rnd_u32() % 5;
        if (k > n - i) k = n - i;
        ok = kvt_grammar_state_accept_bytes(st, s + i, k, &err) == KVT_OK;
        i += k;
    }
    ok = ok && kvt_grammar_state_complete(st);
    kvt_grammar_state_free(st);
    return ok;
}

// llama.cpp's tests/test-grammar-integration.cpp (the grammars, not the JSON schemas): passing and failing strings.
typedef struct {
    const char *name, *src;
    const char *pass[24], *fail[24];
} ivec;

static const ivec llama_integration[] = {
    {"simple grammar",
     "\n            root ::= expr\n            expr ::= term (\"+\" term)*\n            term ::= number\n"
     "            number ::= [0-9]+",
     {"42", "1+2+3+4+5", "123+456"},
     {"+", "/ 3", "1+2+3+4+5+", "12a45"}},
    {"medium complexity grammar",
     "\n            root ::= expression\n            expression ::= term ws ((\"+\"|\"-\") ws term)*\n"
     "            term ::= factor ws ((\"*\"|\"/\") ws factor)*\n"
     "            factor ::= number | variable | \"(\" expression \")\" | function-call\n"
     "            number ::= [0-9]+\n            variable ::= [a-zA-Z_][a-zA-Z0-9_]*\n"
     "            function-call ::= variable ws \"(\" (expression (\",\" ws expression)*)? \")\"\n"
     "            ws ::= [ \\t\\n\\r]?",
     {"42", "1*2*3*4*5", "x", "x+10", "x1+y2", "(a+b)*(c-d)", "func()", "func(x,y+2)", "a*(b+c)-d/e", "f(g(x),h(y,z))",
      "x + 10", "x1 + y2", "(a + b) * (c - d)", "func()", "func(x, y + 2)", "a * (b + c) - d / e", "f(g(x), h(y, z))",
      "123+456", "123*456*789-123/456+789*123",
      "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456"},
     {"+", "/ 3x", "x + + y", "a * / b", "func(,)", "func(x y)", "(a + b", "x + y)", "a + b * (c - d", "42 +", "x +",
      "x + 10 +", "(a + b) * (c - d", "func(", "func(x, y + 2", "a * (b + c) - d /", "f(g(x), h(y, z)",
      "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456/"}},
    {"special characters",
     "\n            root ::= ... \"abc\" ...\n            ",
     {"abcabcabc", "aaaabcccc", "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0\xe2\x9c\x85" "abc" "\xe2\x9d\x8c\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5"},
     {"aaabcccc", "aaaaabcccc", "aaaabccc", "aaaabccccc",
      "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0\xe2\x9c\x85\xe2\x9d\x8c" "abc" "\xe2\x9d\x8c\xe2\x9c\x85\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5",
      "\xf0\x9f\x94\xb5\xf0\x9f\x9f\xa0" "abc" "\xf0\x9f\x9f\xa0\xf0\x9f\x94\xb5"}},
    {"* quantifier", "root ::= \"a\"*",
     {"", "a", "aaaaa", "aaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
     {"b", "ab", "aab", "ba", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}},
    {"+ quantifier", "root ::= \"a\"+",
     {"a", "aaaaa", "aaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
     {"", "b", "ab", "aab", "ba", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}},
    {"? quantifier", "root ::= \"a\"?", {"", "a"}, {"b", "ab", "aa", "ba"}},
    {"mixed quantifiers",
     "\n            root ::= cons+ vowel* cons? (vowel cons)*\n            vowel ::= [aeiouy]\n"
     "            cons ::= [bcdfghjklmnpqrstvwxyz]\n            ",
     {"yes", "no", "noyes", "crwth", "four", "bryyyy"},
     {"yess", "yesno", "forty", "catyyy"}},
    {"simple exact repetition", "\n            root ::= [ab]{4}\n        ", {"aaaa", "bbbb", "abab"}, {"a", "b", "aaaaa"}},
    {"simple min repetition", "\n            root ::= [ab]{4,}\n        ", {"aaaa", "aaaaab", "bbbb", "ababab"},
     {"", "aba"}},
    {"simple max repetition", "\n            root ::= [ab]{0,4}\n        ", {"", "a", "aa", "aaa", "aaab"}, {"aaaaa"}},
    {"min / max repetition", "\n            root ::= (\"0x\" [A-F0-9]{2} \" \"?){3,5}\n        ",
     {"0xFF 0x12 0xAB", "0xFF 0x12 0xAB 0x00 0x00"},
     {"", "0xFF", "0xFF 0x12", "0xFF 0x12 0xAB 0x00 0x00 0x00"}},
    {"segfault", "\n            root ::= ( [x]* )*\n        ", {"", "x", "xx"}, {"y", "yy"}},
    // llama.cpp's grammars/: json.gbnf, list.gbnf and arithmetic.gbnf with strings of their languages
    {"json.gbnf",
     "root   ::= object\nvalue  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n\n"
     "object ::=\n  \"{\" ws (\n            string \":\" ws value\n    (\",\" ws string \":\" ws value)*\n  )? \"}\" ws\n\n"
     "array  ::=\n  \"[\" ws (\n            value\n    (\",\" ws value)*\n  )? \"]\" ws\n\n"
     "string ::=\n  \"\\\"\" (\n    [^\"\\\\\\x7F\\x00-\\x1F] |\n    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
     "  )* \"\\\"\" ws\n\n"
     "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n\n"
     "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
     "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
     {"{}", "{\"a\": 1}", "{\"a\":[1, 2.5, -3e7, true, null, \"x\\n\\u00e9\"], \"b\": {\"c\": {}}}",
      "{\"k\": \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x94\xb5\"}\n", "{ \"a\" : 0 }"},
     {"", "[]", "{", "{\"a\" 1}", "{\"a\": 01}", "{\"a\": \"\\x\"}", "{\"a\": tru}", "{\"a\": 1,}", "{\"a\": \"\x01\"}",
      "{} {}"}},
    {"list.gbnf",
     "root ::= item+\n\n# Excludes various line break characters\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"",
     {"- a\n", "- one\n- two \xc3\xa9\n"}, {"", "- \n", "-a\n", "- a", "- a\xe2\x80\xa8 b\n"}},
    {"arithmetic.gbnf",
     "root  ::= (expr \"=\" ws term \"\\n\")+\nexpr  ::= term ([-+*/] term)*\n"
     "term  ::= ident | num | \"(\" ws expr \")\" ws\nident ::= [a-z] [a-z0-9_]* ws\nnum   ::= [0-9]+ ws\nws    ::= [ \\t\\n]*",
     {"1+2=3\n", "x_1 *(y+2)= 7\nz=q\n"}, {"", "1+2=3", "=3\n", "1+=3\n"}},
};

static void test_integration_vectors(void) {
    int n_cases = 0, bad = 0;
    char why[1024] = "";
    for (size_t c = 0; c < sizeof llama_integration / sizeof llama_integration[0]; c++) {
        const ivec *v = &llama_integration[c];
        kvt_err err = {0};
        kvt_grammar *g = compile(v->src, &err);
        if (!g) {
            if (!bad++) snprintf(why, sizeof why, "%s: %s", v->name, err.msg);
            continue;
        }
        for (int want = 1; want >= 0; want--) {
            const char *const *list = want ? v->pass : v->fail;
            for (int i = 0; i < 24 && list[i]; i++) {
                const size_t n = strlen(list[i]);
                bool m = false, bound;
                const kvt_status st = kvt_grammar_match(g, list[i], n, &m, &err);
                const bool b = bytewise(g, list[i], n, &bound);
                bool p = true;
                for (int r = 0; r < 4; r++) p = p && in_pieces(g, list[i], n) == (bool)want;
                n_cases++;
                if (st != KVT_OK || m != (bool)want || b != (bool)want || !p || bound) {
                    if (!bad++)
                        snprintf(why, sizeof why, "%s: '%s' should %s (match %d, bytewise %d, pieces %d)", v->name,
                                 list[i], want ? "pass" : "fail", m, b, p);
                }
            }
        }
        kvt_grammar_free(g);
    }
    test_result(!bad && n_cases > 140, "grammar_llama_integration", "%d of %d strings wrong: %s", bad, n_cases, why);
}

// llama.cpp's failure vectors: left recursion (4 grammars), missing reference, missing root, custom root.
static void test_llama_failures(void) {
    static const char *const left[] = {
        "root ::= \"a\" | root \"a\"",
        "\n        root ::= asdf\n        asdf ::= \"a\" | asdf \"a\"\n        ",
        "\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | asdf \"d\" | \"e\"",
        "\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | empty asdf \"d\" | \"e\"\n"
        "        empty ::= \"blah\" | ",
    };
    bool ok = true;
    kvt_err err = {0};
    for (size_t i = 0; i < 4; i++) {
        kvt_grammar *g = compile(left[i], &err);
        ok = ok && !g && strstr(err.msg, "left recursion in rule '");
        kvt_grammar_free(g);
    }
    test_result(ok, "grammar_left_recursion", "%s", err.msg);
    kvt_grammar *g = compile("root ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= numero\n"
                             "        number ::= [0-9]+", &err);
    test_result(!g && !strcmp(err.msg, "undefined rule 'numero'"), "grammar_undefined_rule", "%s", err.msg);
    kvt_grammar_free(g);
    g = compile("\n        rot ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= number\n"
                "        number ::= [0-9]+", &err);
    test_result(!g && !strcmp(err.msg, "no rule 'root'"), "grammar_missing_root", "%s", err.msg);
    kvt_grammar_free(g);
    const char *custom = "\n        foobar ::= \"foobar\"\n    ";
    kvt_grammar *a = NULL, *b = NULL;
    const kvt_status sa = kvt_grammar_parse(custom, strlen(custom), "nonexistent", NULL, &a, &err);
    const kvt_status sb = kvt_grammar_parse(custom, strlen(custom), "foobar", NULL, &b, &err);
    bool m = false;
    if (b) kvt_grammar_match(b, "foobar", 6, &m, &err);
    test_result(sa == KVT_ERR_INVALID_ARG && !a && sb == KVT_OK && m, "grammar_custom_root", "%s", err.msg);
    kvt_grammar_free(a);
    kvt_grammar_free(b);
}

// --- a synthetic vocabulary ------------------------------------------------------------------------------------------

typedef struct {
    int32_t n;
    char **piece;
    size_t *len;
    bool *eog;
} tvocab;

static void tv_free(tvocab *t) {
    for (int32_t i = 0; i < t->n; i++) free(t->piece[i]);
    free(t->piece);
    free(t->len);
    free(t->eog);
}

static bool tv_init(tvocab *t, int32_t n) {
    t->n = n;
    t->piece = calloc((size_t)n, sizeof *t->piece);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->eog = calloc((size_t)n, sizeof *t->eog);
    return t->piece && t->len && t->eog;
}

static void tv_set(tvocab *t, int32_t i, const char *s, size_t n) {
    free(t->piece[i]);
    t->piece[i] = malloc(n + 1);
    memcpy(t->piece[i], s, n);
    t->piece[i][n] = 0;
    t->len[i] = n;
}

static kvt_grammar_vocab *tv_make(const tvocab *t) {
    kvt_grammar_vocab *v = NULL;
    kvt_err err;
    kvt_grammar_vocab_init(t->n, (const char *const *)t->piece, t->len, t->eog, &v, &err);
    return v;
}

// The token vocabulary of llama.cpp's token tests: ids 32..126 the ASCII characters, 10..21 special tokens "<tN>",
// the rest "<uN>"; token text "<[N]>" in a test string is token N.
static int32_t lookup_special(void *ctx, const char *text, size_t len) {
    const tvocab *t = ctx;
    for (int32_t i = 0; i < t->n; i++)
        if (t->len[i] == len && !memcmp(t->piece[i], text, len)) return i;
    return -1;
}

// Accepts the tokens of s (0xff N: token N; any other byte: the token of that character) one by one, checking each
// against the filter over the whole vocabulary. Returns whether s is a complete sentence; *incons: filter and accept
// disagreed.
static bool accept_tokens(const kvt_grammar *g, const kvt_grammar_vocab *v, const char *s, bool *incons) {
    kvt_grammar_state *st;
    kvt_err err;
    *incons = false;
    if (kvt_grammar_state_init(g, &st, &err) != KVT_OK) return false;
    const int32_t nv = kvt_grammar_vocab_n(v);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    uint8_t *allowed = malloc((size_t)nv);
    for (int32_t i = 0; i < nv; i++) ids[i] = i;
    bool ok = true;
    for (size_t i = 0; ok && s[i]; i++) {
        int32_t id = (unsigned char)s[i];
        if (id == 0xff) id = (unsigned char)s[++i];
        if (kvt_grammar_state_filter(st, v, ids, nv, allowed, &err) != KVT_OK) *incons = true;
        uint8_t one = 2;
        kvt_grammar_state_filter(st, v, &id, 1, &one, &err);
        ok = kvt_grammar_state_accept(st, v, id, &err) == KVT_OK;
        if (allowed[id] != ok || one != ok) *incons = true;
    }
    ok = ok && kvt_grammar_state_complete(st);
    free(ids);
    free(allowed);
    kvt_grammar_state_free(st);
    return ok;
}

static void test_token_refs(void) {
    tvocab t;
    if (!tv_init(&t, 128)) return test_result(false, "grammar_token_refs", "out of memory");
    char buf[16];
    for (int32_t i = 0; i < 128; i++) {
        if (i >= 32 && i < 127) buf[0] = (char)i, buf[1] = 0;
        else snprintf(buf, sizeof buf, i >= 10 && i <= 21 ? "<t%d>" : "<u%d>", (int)i);
        tv_set(&t, i, buf, strlen(buf));
    }
    kvt_grammar_vocab *v = tv_make(&t);
    static const ivec tv[] = {
        {"simple grammar with tokens", "\n            root ::= <[10]> content <[11]>\n            content ::= (!<[11]>)*",
         {"\xff\x0ahello world\xff\x0b", "\xff\x0atext with \xff\x0c other tokens \xff\x0d mixed in\xff\x0b",
          "\xff\x0a\xff\x0b", "\xff\x0a\xff\x0c\xff\x0d\xff\x0e\xff\x0f\xff\x0b", "\xff\x0a" "a\xff\x0b"},
         {"\xff\x0amissing end token", "\xff\x0a", "missing start token\xff\x0b", "\xff\x0a\xff\x0b\xff\x0b",
          "\xff\x0bwrong order\xff\x0a"}},
        {"complex grammar with tokens",
         "\n            root ::= reasoning+ content tool-call*\n            reasoning ::= <[10]> (!<[11]>)* <[11]>\n"
         "            content ::= <[20]> (!<[21]>)* <[21]>\n            tool-call ::= <[12]> name <[13]> args <[14]>\n"
         "            name ::= (!<[13]>)+\n            args ::= (!<[14]>)*",
         {"\xff\x0aI am thinking\xff\x0b\xff\x14hello world!\xff\x15\xff\x0csearch\xff\x0dquery=test\xff\x0e",
          "\xff\x0areasoning 1\xff\x0b\xff\x0areasoning 2\xff\x0b\xff\x14\xff\x15\xff\x0ctool\xff\x0d\xff\x0e",
          "\xff\x0a\xff\x0b\xff\x14" "content\xff\x15",
          "\xff\x0athink\xff\x0c nested\xff\x0b\xff\x14\xff\x0amore content\xff\x15\xff\x0c" "fn\xff\x0dx=1,y=2\xff\x0e"
          "\xff\x0c" "fn2\xff\x0d\xff\x0e",
          "\xff\x0areasoning\xff\x0b\xff\x0amore\xff\x0b\xff\x0a" "even more\xff\x0b\xff\x14text\xff\x15\xff\x0c" "a\xff\x0d"
          "b\xff\x0e\xff\x0c" "c\xff\x0d" "d\xff\x0e"},
         {"\xff\x14" "content only\xff\x15", "\xff\x0ano closing reasoning", "\xff\x0a\xff\x0b\xff\x14no closing content",
          "\xff\x0a\xff\x0b\xff\x14\xff\x15\xff\x0cincomplete tool", "\xff\x0a\xff\x0b\xff\x0b\xff\x14\xff\x15"}},
        // <|text|> references looked up in the vocabulary, and text around them
        {"looked-up references", "root ::= <t10> \"x\"+ <t11>", {"\xff\x0ax\xff\x0b", "\xff\x0axxx\xff\x0b"},
         {"\xff\x0a\xff\x0b", "x\xff\x0b", "\xff\x0ay\xff\x0b"}},
    };
    int bad = 0, n = 0;
    char why[1024] = "";
    kvt_grammar_params p = kvt_grammar_params_default();
    p.token_lookup = lookup_special;
    p.token_lookup_ctx = &t;
    for (size_t c = 0; v && c < sizeof tv / sizeof tv[0]; c++) {
        kvt_grammar *g = NULL;
        kvt_err err = {0};
        if (kvt_grammar_parse(tv[c].src, strlen(tv[c].src), NULL, &p, &g, &err) != KVT_OK) {
            if (!bad++) snprintf(why, sizeof why, "%s: %s", tv[c].name, err.msg);
            continue;
        }
        for (int want = 1; want >= 0; want--) {
            const char *const *list = want ? tv[c].pass : tv[c].fail;
            for (int i = 0; i < 24 && list[i]; i++, n++) {
                bool incons;
                const bool m = accept_tokens(g, v, list[i], &incons);
                if ((m != (bool)want || incons) && !bad++)
                    snprintf(why, sizeof why, "%s: string %d should %s (got %d, filter/accept disagree %d)", tv[c].name,
                             i, want ? "pass" : "fail", m, incons);
            }
        }
        // text never matches a token reference
        bool m = true;
        kvt_grammar_match(g, "<t10>x<t11>", 11, &m, &err);
        if (m && !bad++) snprintf(why, sizeof why, "%s: the text of the tokens matched", tv[c].name);
        kvt_grammar_free(g);
    }
    test_result(v && !bad && n == 25, "grammar_token_refs", "%d of %d wrong: %s", bad, n, why);
    // a <|...|> that is no token
    kvt_grammar *g = NULL;
    kvt_err err = {0};
    const char *src = "root ::= <|nope|>";
    const kvt_status st = kvt_grammar_parse(src, strlen(src), NULL, &p, &g, &err);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "line 1 column 10: invalid token '<|nope|>'"),
                "grammar_token_lookup_unknown", "%s", err.msg);
    kvt_grammar_free(g);
    kvt_grammar_vocab_free(v);
    tv_free(&t);
}

// Brute force: token id is allowed when it ends generation and the state is complete, or its piece (cut at a NUL) is
// non-empty and accept_bytes of it succeeds on a clone.
static bool brute_allowed(const kvt_grammar_state *s, const tvocab *t, int32_t id) {
    if (t->eog[id]) return kvt_grammar_state_complete(s);
    const size_t n = strnlen(t->piece[id], t->len[id]);
    if (!n) return false;
    kvt_grammar_state *c;
    kvt_err err;
    if (kvt_grammar_state_clone(s, &c, &err) != KVT_OK) return false;
    const bool ok = kvt_grammar_state_accept_bytes(c, t->piece[id], n, &err) == KVT_OK;
    kvt_grammar_state_free(c);
    return ok;
}

// Random pieces over JSON's, arithmetic's and some multi-byte characters, split UTF-8 sequences, invalid bytes, a
// piece with a NUL inside, an empty piece and an end-of-generation token.
static void make_random_vocab(tvocab *t, int32_t n) {
    static const char *const units[] = {
        "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "\\", "-", ".", "e", "+", "*", "/", "=", "(", ")", "0", "1",
        "7", "9", "a", "b", "x", "y", "z", "t", "r", "u", "n", "l", "s", "f", "_", "\t", "\xc3\xa9", "\xe2\x82\xac",
        "\xf0\x9f\x94\xb5", "\xe4\xb8\xad"};
    static const char *const odd[] = {"\xc3", "\xa9", "\xe2\x82", "\xac", "\xe2", "\x82\xac", "\xf0\x9f", "\x94\xb5",
                                      "\xff", "\x80", "\xc3" "A", "a\0b", "", "true", "null", "\"a\"", "\xa9x", "e\xc3"};
    const size_t n_units = sizeof units / sizeof units[0], n_odd = sizeof odd / sizeof odd[0];
    tv_set(t, 0, "</s>", 4);
    t->eog[0] = true;
    for (int32_t i = 1; i < n; i++) {
        if ((size_t)i <= n_odd) {
            const char *s = odd[i - 1];
            tv_set(t, i, s, strlen(s)); // ("a\0b" gets its 3 bytes in test_filter_brute)
            continue;
        }
        char buf[64];
        size_t k = 0;
        const int parts = 1 + (int)(rnd_u32() % 4);
        for (int p = 0; p < parts; p++) {
            const char *u = units[rnd_u32() % n_units];
            memcpy(buf + k, u, strlen(u));
            k += strlen(u);
        }
        tv_set(t, i, buf, k);
    }
}

// Whether p[0..n) ends inside a UTF-8 sequence (its last lead byte wants more bytes than follow it).
static bool ends_split(const char *p, size_t n) {
    size_t k = 0;
    while (k < n && k < 3 && ((unsigned char)p[n - 1 - k] >> 6) == 2) k++;
    if (k == n) return false;
    const unsigned char lead = (unsigned char)p[n - 1 - k];
    const size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    return want > k + 1;
}

// Random walks: at each step the filter over every token (one pass), one token at a time and the brute force agree;
// the walk goes on with a random allowed token.
static void test_filter_brute(const test_env *env) {
    static const char *const grammars[] = {
        llama_integration[12].src, // json.gbnf
        llama_integration[14].src, // arithmetic.gbnf
        "root ::= ([a-z] | \"\xc3\xa9\" | \"\xe2\x82\xac\" | [\\u4e00-\\u9fff] | [^\\x00-\\U0001F000])+ (\".\" | \"!\")",
        "root ::= \"a\" | \"a\xc3\xa9\" | [^a\\x00-\\x1f]* \"\\n\"",
        "root ::= (\"1\" [0-9]* | \"a\"+ | \"ab\"{2,3} \"x\"?)+",
    };
    tvocab t;
    const int32_t nv = 600;
    if (!tv_init(&t, nv)) return test_result(false, "grammar_filter_brute", "out of memory");
    make_random_vocab(&t, nv);
    // (the NUL piece: "a\0b" of 3 bytes)
    tv_set(&t, 12, "a\0b", 3);
    kvt_grammar_vocab *v = tv_make(&t);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    uint8_t *all = malloc((size_t)nv), *one = malloc((size_t)nv), *sub = malloc((size_t)nv);
    int bad = 0, steps = 0, n_allowed = 0, partial_steps = 0;
    char why[1024] = "";
    for (int32_t i = 0; i < nv; i++) ids[i] = i;
    for (size_t gi = 0; v && gi < sizeof grammars / sizeof grammars[0]; gi++) {
        kvt_err err = {0};
        kvt_grammar *g = compile(grammars[gi], &err);
        if (!g) {
            if (!bad++) snprintf(why, sizeof why, "grammar %zu: %s", gi, err.msg);
            continue;
        }
        for (int walk = 0; walk < (env->quick ? 2 : 6); walk++) {
            kvt_grammar_state *s;
            if (kvt_grammar_state_init(g, &s, &err) != KVT_OK) break;
            for (int step = 0; step < 25; step++, steps++) {
                kvt_status st = kvt_grammar_state_filter(s, v, ids, nv, all, &err);
                for (int32_t i = 0; st == KVT_OK && i < nv; i++) st = kvt_grammar_state_filter(s, v, &ids[i], 1, &one[i], &err);
                // a shuffled subset of 100 (the per-token path with its cache shared across tokens)
                int32_t pick[100];
                for (int i = 0; i < 100; i++) pick[i] = (int32_t)(rnd_u32() % (uint32_t)nv);
                if (st == KVT_OK) st = kvt_grammar_state_filter(s, v, pick, 100, sub, &err);
                if (st != KVT_OK) {
                    if (!bad++) snprintf(why, sizeof why, "grammar %zu: %s", gi, err.msg);
                    break;
                }
                int32_t cand[600], n_c = 0;
                for (int32_t i = 0; i < nv; i++) {
                    const bool b = brute_allowed(s, &t, i);
                    if ((all[i] != b || one[i] != b) && !bad++)
                        snprintf(why, sizeof why, "grammar %zu step %d token %d '%s': filter %d, one %d, brute %d", gi,
                                 step, (int)i, t.piece[i], all[i], one[i], b);
                    if (b && !t.eog[i]) cand[n_c++] = i;
                    n_allowed += b;
                }
                for (int i = 0; i < 100; i++)
                    if (sub[i] != all[pick[i]] && !bad++)
                        snprintf(why, sizeof why, "grammar %zu: a subset's answer differs for token %d", gi, (int)pick[i]);
                // an id outside the vocabulary
                int32_t out_ids[2] = {-1, nv};
                uint8_t out_a[2] = {1, 1};
                kvt_grammar_state_filter(s, v, out_ids, 2, out_a, &err);
                if ((out_a[0] || out_a[1]) && !bad++) snprintf(why, sizeof why, "ids outside the vocabulary allowed");
                if (!n_c) break;
                // (a split character half the time when one is allowed)
                int32_t next = cand[rnd_u32() % (uint32_t)n_c], n_split = 0;
                for (int32_t i = 0; i < n_c; i++)
                    if (ends_split(t.piece[cand[i]], t.len[cand[i]])) cand[n_split++] = cand[i];
                if (n_split && rnd_u32() % 2) next = cand[rnd_u32() % (uint32_t)n_split];
                if (kvt_grammar_state_accept(s, v, next, &err) != KVT_OK && !bad++)
                    snprintf(why, sizeof why, "accept of allowed token %d: %s", (int)next, err.msg);
                // a rejected token leaves the state as it is
                for (int32_t i = 1; i < nv; i++) {
                    uint8_t a;
                    kvt_grammar_state_filter(s, v, &i, 1, &a, &err);
                    if (a) continue;
                    kvt_grammar_state *c;
                    kvt_grammar_state_clone(s, &c, &err);
                    const kvt_status sr = kvt_grammar_state_accept(s, v, i, &err);
                    uint8_t b1, b2;
                    kvt_grammar_state_filter(s, v, &next, 1, &b1, &err);
                    kvt_grammar_state_filter(c, v, &next, 1, &b2, &err);
                    if ((sr != KVT_ERR_INVALID_ARG || b1 != b2) && !bad++)
                        snprintf(why, sizeof why, "rejected token %d: status %d, state changed", (int)i, (int)sr);
                    kvt_grammar_state_free(c);
                    break;
                }
                partial_steps += ends_split(t.piece[next], t.len[next]);
            }
            kvt_grammar_state_free(s);
        }
        kvt_grammar_free(g);
    }
    test_result(v && !bad && steps > (env->quick ? 40 : 100) && n_allowed > 1000 && partial_steps > (env->quick ? 3 : 10), "grammar_filter_brute",
                "%d bad over %d steps (%d allowed, %d after a split character): %s", bad, steps, n_allowed,
                partial_steps, why);
    free(ids);
    free(all);
    free(one);
    free(sub);
    kvt_grammar_vocab_free(v);
    tv_free(&t);
}

static bool allowed1(const kvt_grammar_state *s, const kvt_grammar_vocab *v, int32_t id) {
    uint8_t a = 0;
    kvt_err err;
    kvt_grammar_state_filter(s, v, &id, 1, &a, &err);
    return a;
}

// A character split across tokens: "\xc3" then "\xa9" is é; the end only when no sequence is pending.
static void test_partial_utf8(void) {
    static const char *const pieces[] = {"</s>", "\xc3", "\xa9", "x", "\xe2\x82", "\xac", "\xe2", "\x82", "\xc3\xa9",
                                         "\xa9x", "\xa8", "\xe2\x82\xac"};
    enum { EOG, C3, A9, X, E282, AC, E2, B82, EACUTE, A9X, A8, EURO, N };
    tvocab t;
    if (!tv_init(&t, N)) return test_result(false, "grammar_partial_utf8", "out of memory");
    for (int i = 0; i < N; i++) tv_set(&t, i, pieces[i], strlen(pieces[i]));
    t.eog[EOG] = true;
    kvt_grammar_vocab *v = tv_make(&t);
    kvt_err err;
    kvt_grammar *g = compile("root ::= \"\xc3\xa9\" \"x\" | \"\xe2\x82\xac\"", &err);
    kvt_grammar_state *s = NULL;
    bool ok = v && g && kvt_grammar_state_init(g, &s, &err) == KVT_OK;
    ok = ok && allowed1(s, v, C3) && !allowed1(s, v, A9) && allowed1(s, v, E282) && allowed1(s, v, E2) &&
         allowed1(s, v, EACUTE) && !allowed1(s, v, X) && !allowed1(s, v, EOG) && allowed1(s, v, EURO);
    ok = ok && kvt_grammar_state_accept(s, v, C3, &err) == KVT_OK;
    ok = ok && allowed1(s, v, A9) && allowed1(s, v, A9X) && !allowed1(s, v, X) && !allowed1(s, v, A8) &&
         !allowed1(s, v, AC) && !allowed1(s, v, EOG) && !kvt_grammar_state_complete(s);
    kvt_grammar_state *c = NULL;
    ok = ok && kvt_grammar_state_clone(s, &c, &err) == KVT_OK;
    ok = ok && kvt_grammar_state_accept(s, v, A9, &err) == KVT_OK && allowed1(s, v, X) && !allowed1(s, v, EOG);
    ok = ok && kvt_grammar_state_accept(s, v, X, &err) == KVT_OK && allowed1(s, v, EOG) &&
         kvt_grammar_state_complete(s) && kvt_grammar_state_done(s) && !allowed1(s, v, X);
    ok = ok && kvt_grammar_state_accept(s, v, EOG, &err) == KVT_OK; // (leaves the state as it is)
    ok = ok && c && kvt_grammar_state_accept(c, v, A9X, &err) == KVT_OK && kvt_grammar_state_complete(c);
    kvt_grammar_state_free(c);
    kvt_grammar_state_free(s);
    s = NULL;
    // € in three tokens
    ok = ok && kvt_grammar_state_init(g, &s, &err) == KVT_OK && kvt_grammar_state_accept(s, v, E2, &err) == KVT_OK &&
         allowed1(s, v, B82) && !allowed1(s, v, A9) && kvt_grammar_state_accept(s, v, B82, &err) == KVT_OK &&
         !allowed1(s, v, EOG) && allowed1(s, v, AC) && kvt_grammar_state_accept(s, v, AC, &err) == KVT_OK &&
         kvt_grammar_state_done(s) && allowed1(s, v, EOG);
    kvt_grammar_state_free(s);
    // bytes: a pending sequence rejected at the offending byte, the state unchanged
    s = NULL;
    ok = ok && kvt_grammar_state_init(g, &s, &err) == KVT_OK &&
         kvt_grammar_state_accept_bytes(s, "\xc3", 1, &err) == KVT_OK &&
         kvt_grammar_state_accept_bytes(s, "\xa8", 1, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "byte 0") &&
         kvt_grammar_state_accept_bytes(s, "\xa9x", 2, &err) == KVT_OK && kvt_grammar_state_complete(s);
    kvt_grammar_state_free(s);
    kvt_grammar_free(g);
    kvt_grammar_vocab_free(v);
    tv_free(&t);
    test_result(ok, "grammar_partial_utf8", "%s", err.msg);
}

// max_stacks: at the start and on a later character, as a status; max_repeat and max_rules bounds.
static void test_bounds(void) {
    kvt_grammar_params p = kvt_grammar_params_default();
    p.max_stacks = 2;
    kvt_err err = {0};
    kvt_grammar *g = NULL;
    kvt_grammar_state *s = NULL;
    const char *a = "root ::= \"a\" \"b\" | \"a\" \"c\" | \"a\" \"d\"";
    bool ok = kvt_grammar_parse(a, strlen(a), NULL, &p, &g, &err) == KVT_OK &&
              kvt_grammar_state_init(g, &s, &err) == KVT_ERR_INVALID_ARG && !s && strstr(err.msg, "max_stacks=2");
    kvt_grammar_free(g);
    g = NULL;
    const char *b = "root ::= \"x\" (\"a\" \"b\" | \"a\" \"c\" | \"a\" \"d\")";
    ok = ok && kvt_grammar_parse(b, strlen(b), NULL, &p, &g, &err) == KVT_OK &&
         kvt_grammar_state_init(g, &s, &err) == KVT_OK &&
         kvt_grammar_state_accept_bytes(s, "x", 1, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "max_stacks=2");
    bool m = true;
    ok = ok && kvt_grammar_match(g, "xab", 3, &m, &err) == KVT_ERR_INVALID_ARG && !m;
    kvt_grammar_state_free(s);
    kvt_grammar_free(g);
    test_result(ok, "grammar_max_stacks", "%s", err.msg);

    p = kvt_grammar_params_default();
    p.max_repeat = 10;
    g = NULL;
    ok = kvt_grammar_parse("root ::= \"a\"{10}", 16, NULL, &p, &g, &err) == KVT_OK;
    kvt_grammar_free(g);
    g = NULL;
    ok = ok && kvt_grammar_parse("root ::= \"a\"{11}", 16, NULL, &p, &g, &err) == KVT_ERR_INVALID_ARG &&
         strstr(err.msg, "max_repeat=10");
    // {0,11}: a max over the bound means no max (llama.cpp), so "a"{0,11} is "a"*
    ok = ok && kvt_grammar_parse("root ::= \"a\"{0,11}", 18, NULL, &p, &g, &err) == KVT_OK;
    if (g) kvt_grammar_match(g, "aaaaaaaaaaaaaaaaaaaa", 20, &m, &err);
    ok = ok && m;
    kvt_grammar_free(g);
    g = NULL;
    p = kvt_grammar_params_default();
    p.max_rules = 3;
    ok = ok && kvt_grammar_parse("root ::= \"a\"{0,5}", 17, NULL, &p, &g, &err) == KVT_ERR_INVALID_ARG &&
         strstr(err.msg, "max_rules=3");
    test_result(ok, "grammar_max_repeat_rules", "%s", err.msg);
    kvt_grammar_free(g);
    // elements: a long literal copied 2000 times is over 64 x max_rules
    p.max_rules = 100;
    char src[200];
    snprintf(src, sizeof src, "root ::= \"%s\"{2000}", "0123456789012345678901234567890123456789");
    g = NULL;
    const kvt_status st = kvt_grammar_parse(src, strlen(src), NULL, &p, &g, &err);
    test_result(st == KVT_ERR_INVALID_ARG && strstr(err.msg, "max_rules=100"), "grammar_max_elements", "%s", err.msg);
    kvt_grammar_free(g);
}

// References: the state keeps the grammar, the vocabulary is shared, clones advance on their own.
static void test_refs_clone(void) {
    kvt_err err;
    kvt_grammar *g = compile("root ::= \"ab\" [0-9]+", &err);
    kvt_grammar *g2 = kvt_grammar_ref(g);
    kvt_grammar_state *s = NULL, *c = NULL;
    bool ok = g && g2 == g && kvt_grammar_ref(NULL) == NULL && kvt_grammar_n_rules(g) == 2;
    ok = ok && kvt_grammar_state_init(g, &s, &err) == KVT_OK;
    kvt_grammar_free(g);
    kvt_grammar_free(g2); // the state's reference keeps it
    ok = ok && kvt_grammar_state_accept_bytes(s, "a", 1, &err) == KVT_OK &&
         kvt_grammar_state_clone(s, &c, &err) == KVT_OK && kvt_grammar_state_accept_bytes(c, "b1", 2, &err) == KVT_OK &&
         kvt_grammar_state_complete(c) && !kvt_grammar_state_done(c) && !kvt_grammar_state_complete(s) &&
         kvt_grammar_state_accept_bytes(s, "1", 1, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "byte 0") &&
         kvt_grammar_state_accept_bytes(s, "b12x", 4, &err) == KVT_ERR_INVALID_ARG && strstr(err.msg, "byte 3") &&
         kvt_grammar_state_accept_bytes(s, "b", 1, &err) == KVT_OK;
    kvt_grammar_state_free(s);
    kvt_grammar_state_free(c);
    tvocab t;
    kvt_grammar_vocab *v = NULL, *v2 = NULL;
    if (tv_init(&t, 3)) {
        tv_set(&t, 0, "a", 1);
        tv_set(&t, 1, "", 0);
        tv_set(&t, 2, "b", 1);
        v = tv_make(&t);
        v2 = kvt_grammar_vocab_ref(v);
        tv_free(&t);
    }
    ok = ok && v && v2 == v && kvt_grammar_vocab_n(v) == 3;
    kvt_grammar_vocab_free(v);
    ok = ok && kvt_grammar_vocab_n(v2) == 3;
    kvt_grammar_vocab_free(v2);
    kvt_grammar_vocab *none = NULL;
    ok = ok && kvt_grammar_vocab_init(0, NULL, NULL, NULL, &none, &err) == KVT_ERR_INVALID_ARG && !none;
    test_result(ok, "grammar_refs_clone", "%s", err.msg);
}

// A JSON grammar over a vocabulary of random pieces: the whole-vocabulary filter's time inside a string and after
// "{" (recorded; fails only past 50 ms per call).
static void test_filter_speed(const test_env *env) {
    const int32_t nv = env->quick ? 16384 : 65536;
    tvocab t;
    if (!tv_init(&t, nv)) return test_result(false, "grammar_filter_speed", "out of memory");
    make_random_vocab(&t, nv);
    kvt_grammar_vocab *v = tv_make(&t);
    kvt_err err;
    kvt_grammar *g = compile(llama_integration[12].src, &err);
    kvt_grammar_state *s = NULL;
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    uint8_t *a = malloc((size_t)nv);
    for (int32_t i = 0; i < nv; i++) ids[i] = i;
    bool ok = v && g && kvt_grammar_state_init(g, &s, &err) == KVT_OK &&
              kvt_grammar_state_accept_bytes(s, "{\"ab", 4, &err) == KVT_OK;
    double worst = 0;
    for (int r = 0; ok && r < 3; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ok = kvt_grammar_state_filter(s, v, ids, nv, a, &err) == KVT_OK;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
        if (ms > worst) worst = ms;
    }
    test_result(ok && worst < 50, "grammar_filter_speed", "%d tokens: %.2f ms (%s)", (int)nv, worst, err.msg);
    kvt_grammar_state_free(s);
    kvt_grammar_free(g);
    kvt_grammar_vocab_free(v);
    free(ids);
    free(a);
    tv_free(&t);
}

// --- llama.cpp's allowed sets (tests/data/grammar_golden.txt) --------------------------------------------------------

// The golden's one-line text form back to bytes (\\ \n \t \r \xHH), in place; the new length.
static size_t golden_unescape(char *s) {
    char *o = s;
    for (const char *p = s; *p; p++) {
        if (*p != '\\' || !p[1]) {
            *o++ = *p;
            continue;
        }
        p++;
        if (*p == 'x' && p[1] && p[2]) {
            char hex[3] = {p[1], p[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            p += 2;
        } else {
            *o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p;
        }
    }
    *o = 0;
    return (size_t)(o - s);
}

// 64-bit FNV-1a of the allowed ids in increasing order, each as 4 little-endian bytes (the golden's hash); *count set.
static uint64_t golden_hash(const uint8_t *allowed, int32_t n, int64_t *count) {
    uint64_t h = 0xcbf29ce484222325ull;
    *count = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!allowed[i]) continue;
        (*count)++;
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)i >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    }
    return h;
}

typedef struct {
    char name[64];
    kvt_grammar *g;
    kvt_grammar_state *s;
    int walks, walk, step, steps, differ;
    bool dead;       // this walk cannot go on (kvtier refused the chosen token, or an error)
    char first[512]; // the first difference
} golden_case;

// Counts a differing step; the first is described as "walk W step S: " (once a walk has begun) and fmt.
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void golden_note(golden_case *c, const char *fmt, ...) {
    c->differ++;
    if (c->first[0]) return;
    const int k = c->walk < 0 ? 0 : snprintf(c->first, sizeof c->first, "walk %d step %d: ", c->walk, c->step);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->first + k, sizeof c->first - (size_t)k, fmt, ap);
    va_end(ap);
}

static void golden_finish(golden_case *c, int *walks, int *steps) {
    if (!c->name[0]) return;
    *walks += c->walks;
    *steps += c->steps;
    char name[96];
    snprintf(name, sizeof name, "grammar_golden.%s", c->name);
    if (c->differ) {
        test_result(false, name, "%d of %d steps differ from llama.cpp; first: %s", c->differ, c->steps, c->first);
    } else {
        test_result(c->steps > 0, name, "%d walks, %d steps: the same allowed sets as llama.cpp", c->walks, c->steps);
    }
    kvt_grammar_state_free(c->s);
    kvt_grammar_free(c->g);
    memset(c, 0, sizeof *c);
}

// Replays llama.cpp's random walks: at each step the allowed set of kvt_grammar_state_filter over the whole
// vocabulary (its size and hash) must be llama.cpp's, then the walk's token is accepted. One case per grammar.
// About 0.5 s (-O2); sanitizer builds replay the first 20 steps of each walk.
// KVT_GRAMMAR_GOLDEN_DUMP=FILE writes kvtier's allowed ids at each differing step ("NAME WALK STEP id ..."), for
// tools/golden/grammar_golden.py --debug FILE.
static void test_grammar_golden(const test_env *env) {
    char gpath[1024], vpath[1024];
    if (!test_data(env, "grammar_golden.txt", gpath, sizeof gpath)) {
        return test_skip("grammar_golden", test_data_missing(env, "grammar_golden.txt"));
    }
    if (!test_data(env, "ggml-vocab-llama-spm.gguf", vpath, sizeof vpath)) {
        return test_skip("grammar_golden", test_data_missing(env, "ggml-vocab-llama-spm.gguf"));
    }
    kvt_err err = {0};
    kvt_gguf *gf = NULL;
    kvt_tokenizer *t = NULL;
    kvt_grammar_vocab *v = NULL;
    size_t len = 0;
    char *text = test_read_file(gpath, &len);
    if (!text || kvt_gguf_open(vpath, &gf, &err) != KVT_OK || kvt_tokenizer_init(gf, &t, &err) != KVT_OK ||
        kvt_grammar_vocab_from_tokenizer(t, &v, &err) != KVT_OK) {
        test_result(false, "grammar_golden", "cannot load %s / %s: %s", gpath, vpath, err.msg);
        goto out;
    }
    const int32_t nv = kvt_grammar_vocab_n(v);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    uint8_t *allowed = malloc((size_t)nv);
    const char *dump_path = getenv("KVT_GRAMMAR_GOLDEN_DUMP");
    FILE *dump = dump_path && *dump_path ? fopen(dump_path, "w") : NULL;
    for (int32_t i = 0; ids && i < nv; i++) ids[i] = i;
    golden_case c;
    memset(&c, 0, sizeof c);
    int n_grammars = 0, n_walks = 0, n_steps = 0;
    const int max_steps = env->quick ? 20 : 1 << 30; // sanitizer builds: the first 20 steps of each walk
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (char *line = text, *next; ids && allowed && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (!*line || *line == '#') continue;
        if (!strncmp(line, "grammar ", 8)) {
            golden_finish(&c, &n_walks, &n_steps);
            snprintf(c.name, sizeof c.name, "%s", line + 8);
            c.walk = -1;
            n_grammars++;
        } else if (!strncmp(line, "text ", 5)) {
            const size_t n = golden_unescape(line + 5);
            if (kvt_grammar_parse_tok(line + 5, n, t, &c.g, &err) != KVT_OK) {
                golden_note(&c, "kvtier refuses the grammar: %s", err.msg);
            }
        } else if (!strncmp(line, "walk ", 5)) {
            kvt_grammar_state_free(c.s);
            c.s = NULL;
            c.walks++;
            c.walk++;
            c.step = 0;
            c.dead = !c.g || kvt_grammar_state_init(c.g, &c.s, &err) != KVT_OK;
            if (c.g && c.dead) golden_note(&c, "%s", err.msg);
        } else {
            long long want_n = 0, chosen = 0;
            unsigned long long want_h = 0;
            if (sscanf(line, "%lld %llx %lld", &want_n, &want_h, &chosen) != 3) {
                golden_note(&c, "unreadable golden line '%s'", line);
                c.dead = true;
            }
            if (c.dead || c.step >= max_steps) continue;
            c.steps++;
            int64_t got_n = 0;
            uint64_t got_h = 0;
            if (kvt_grammar_state_filter(c.s, v, ids, nv, allowed, &err) != KVT_OK) {
                golden_note(&c, "filter failed: %s", err.msg);
                c.dead = true;
                continue;
            }
            got_h = golden_hash(allowed, nv, &got_n);
            if (got_n != want_n || got_h != (uint64_t)want_h) {
                golden_note(&c, "allowed ids: llama.cpp %lld (hash %016llx), kvtier %lld (hash %016llx)", want_n,
                            want_h, (long long)got_n, (unsigned long long)got_h);
                if (dump) {
                    fprintf(dump, "%s %d %d", c.name, c.walk, c.step);
                    for (int32_t i = 0; i < nv; i++) {
                        if (allowed[i]) fprintf(dump, " %d", (int)i);
                    }
                    fputc('\n', dump);
                }
            }
            if (chosen >= 0 && kvt_grammar_state_accept(c.s, v, (int32_t)chosen, &err) != KVT_OK) {
                golden_note(&c, "accepting llama.cpp's token %lld: %s", chosen, err.msg);
                c.dead = true;
            }
            c.step++;
        }
    }
    golden_finish(&c, &n_walks, &n_steps);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# grammar_golden: %d grammars, %d walks, %d steps over %d tokens: %.0f ms\n", n_grammars, n_walks, n_steps,
           (int)nv, (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    if (!n_grammars) test_result(false, "grammar_golden", "%s: no grammar", gpath);
    if (dump) fclose(dump);
    free(ids);
    free(allowed);
out:
    kvt_grammar_vocab_free(v);
    kvt_tokenizer_free(t);
    kvt_gguf_free(gf);
    free(text);
}

void test_grammar(const test_env *env) {
    test_parser_vectors();
    test_parse_errors();
    test_integration_vectors();
    test_llama_failures();
    test_token_refs();
    test_partial_utf8();
    test_filter_brute(env);
    test_bounds();
    test_refs_clone();
    test_filter_speed(env);
    test_grammar_golden(env);
}
