// test_json_schema.c - JSON schemas turned into grammars (src/serve/json_schema.h), checked through the grammar
// matcher (src/sched/grammar.h): each schema's grammar compiles, accepts the texts llama.cpp's accepts and refuses
// the ones it refuses (the vectors of llama.cpp's tests/test-grammar-integration.cpp, test_json_schema, then
// kvtier's own), and the conversion refuses what it cannot enforce, naming the path and the keyword.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KVT_HAVE_JANSSON
#include <jansson.h>

#include "../src/sched/grammar.h"
#include "../src/serve/json_schema.h"

typedef struct {
    const char *name, *schema;
    const char *pass[12], *fail[12];
} vec;

// llama.cpp's tests/test-grammar-integration.cpp, test_json_schema (schemas and strings as data). Two cases differ:
// "required props" loses "exclusiveMinimum" on a number and "uniqueItems" (kvtier refuses them: llama.cpp ignores
// them, see the error cases), and llama.cpp's commented-out strings stay out.
static const vec LLAMA[] = {
    {"empty schema (any value)", "{}", {"{}", "{\"foo\": \"bar\"}", "[]", "null", "\"\"", "true"},
     {"", "{\"foo\"}", "foo"}},
    {"exotic formats (list)",
     "{\"items\": [{ \"format\": \"date\" }, { \"format\": \"uuid\" }, { \"format\": \"time\" }, "
     "{ \"format\": \"date-time\" }]}",
     {"[\"2012-04-23\", \"12345678-1234-1234-1234-1234567890ab\", \"18:25:43.511Z\", \"2012-04-23T18:25:43.511Z\"]"},
     {"[\"foo\", \"bar\"]", "[\"12345678-1234-1234-1234-1234567890ab\"]"}},
    {"string", "{\"type\": \"string\"}", {"\"foo\"", "\"bar\"", "\"\""}, {"{}", "\"foo\": \"bar\""}},
    {"string w/ min length 1", "{\"type\": \"string\", \"minLength\": 1}", {"\"foo\"", "\"bar\""},
     {"\"\"", "{}", "\"foo\": \"bar\""}},
    {"string w/ min length 3", "{\"type\": \"string\", \"minLength\": 3}", {"\"foo\"", "\"bar\"", "\"foobar\""},
     {"\"\"", "\"f\"", "\"fo\""}},
    {"string w/ max length", "{\"type\": \"string\", \"maxLength\": 3}",
     {"\"foo\"", "\"bar\"", "\"\"", "\"f\"", "\"fo\""}, {"\"foobar\""}},
    {"string w/ min & max length", "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 4}",
     {"\"foo\"", "\"bar\"", "\"f\"", "\"barf\""}, {"\"\"", "\"barfo\"", "\"foobar\""}},
    {"boolean", "{\"type\": \"boolean\"}", {"true", "false"}, {"\"\"", "\"true\"", "True", "FALSE"}},
    {"integer", "{\"type\": \"integer\"}", {"0", "12345", "1234567890123456"},
     {"", "01", "007", "12345678901234567  "}},
    {"string const", "{\"const\": \"foo\"}", {"\"foo\""}, {"foo", "\"bar\""}},
    {"non-string const", "{\"const\": true}", {"true"}, {"", "foo", "\"true\""}},
    {"non-string enum", "{\"enum\": [\"red\", \"amber\", \"green\", null, 42, [\"foo\"]]}",
     {"\"red\"", "null", "42", "[\"foo\"]"}, {"", "420", "true", "foo"}},
    {"simple pattern", "{\"pattern\": \"^[a-zA-Z0-9_-]*$\"}", {"\"\"", "\"He_llo-12\""},
     {"\"!\"", "\"Hello World\""}},
    {"pattern with escapes", "{\"pattern\": \"^a\\\\^\\\\$\\\\.\\\\[\\\\]\\\\(\\\\)\\\\|\\\\{\\\\}\\\\*\\\\+\\\\?b$\"}",
     {"\"a^$.[]()|{}*+?b\""}, {"\"ab\""}},
    {"nullable array", "{\"type\": [\"array\", \"null\"], \"items\": { \"type\": \"string\" }}",
     {"null", "[]", "[\"123\"]", "[\"foo\", \"bar\"]"}, {"", "[123]", "\"foo\"", "[\"foo\", 42]"}},
    {"min+max items", "{\"items\": {\"type\": [\"number\", \"integer\"]}, \"minItems\": 3, \"maxItems\": 5}",
     {"[1, 2, 3]", "[1, 2, 3, 4]", "[1, 2, 3, 4, 5]"}, {"[1, 2]", "[1, 2, 3, 4, 5, 6]", "1"}},
    {"object properties",
     "{\"type\": \"object\", \"properties\": {\"number\": { \"type\": \"number\" }, \"street_name\": "
     "{ \"type\": \"string\" }, \"street_type\": { \"enum\": [\"Street\", \"Avenue\", \"Boulevard\"] }}}",
     {"{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\":\"Avenue\"}",
      "{ \"street_name\": \"Pennsylvania\" }", "{ \"number\": 1600, \"street_name\": \"Pennsylvania\" }", "{}",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\": \"Avenue\" }"},
     {"{ \"number\": \"1600\", \"street_name\": \"Pennsylvania\", \"street_type\":\"Avenue\"}",
      "{ \"street_name\": \"Pennsylvania\", \"number\": 1600 }",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\":\"Avenue\", \"direction\":\"NW\"}"}},
    {"additional properties can't override other properties",
     "{\"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"integer\"}}, \"additionalProperties\": true}",
     {"{\"a\": 42}", "{\"c\": \"\"}", "{\"a\": 42, \"c\": \"\"}", "{\"a_\": \"\"}"},
     {"", "{\"a\": \"\"}", "{\"a\": \"\", \"b\": \"\"}"}},
    {"object properties, additionalProperties: true",
     "{\"type\": \"object\", \"properties\": {\"number\": { \"type\": \"number\" }, \"street_name\": "
     "{ \"type\": \"string\" }, \"street_type\": { \"enum\": [\"Street\", \"Avenue\", \"Boulevard\"] }}, "
     "\"additionalProperties\": true}",
     {"{}", "{\"number\":1600,\"street_name\":\"Pennsylvania\",\"street_type\":\"Avenue\"}",
      "{ \"street_name\": \"Pennsylvania\" }", "{ \"number\": 1600, \"street_name\": \"Pennsylvania\" }",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\":\"Avenue\", \"direction\":\"NW\"}",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\": \"Avenue\" }"},
     {"{ \"number\": \"1600\", \"street_name\": \"Pennsylvania\", \"street_type\":\"Avenue\"}",
      "{ \"street_name\": \"Pennsylvania\", \"number\": 1600, \"street_type\":\"Avenue\"}"}},
    {"required + optional props each in original order (no additional)",
     "{\"type\": \"object\", \"properties\": {\"number\": { \"type\": \"number\" }, \"street_name\": "
     "{ \"type\": \"string\" }, \"street_type\": { \"enum\": [\"Street\", \"Avenue\", \"Boulevard\"] }}, "
     "\"additionalProperties\": false}",
     {"{ \"street_name\": \"Pennsylvania\" }", "{ \"number\": 1600, \"street_type\":\"Avenue\"}",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\" }",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\":\"Avenue\"}",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\": \"Avenue\" }"},
     {"{ \"street_type\": \"Avenue\", \"number\": 1600 }",
      "{ \"number\": 1600, \"street_name\": \"Pennsylvania\", \"street_type\": \"Avenue\", \"direction\": \"NW\" }"}},
    {"required + optional props each in original order",
     "{\"properties\": {\"b\": {\"type\": \"string\"}, \"a\": {\"type\": \"string\"}, \"d\": {\"type\": \"string\"}, "
     "\"c\": {\"type\": \"string\"}}, \"required\": [\"a\", \"b\"], \"additionalProperties\": false}",
     {"{\"b\": \"foo\", \"a\": \"bar\"}", "{\"b\":\"foo\",\"a\":\"bar\",\"d\":\"qux\"}",
      "{\"b\":\"foo\", \"a\":\"bar\", \"d\":\"qux\", \"c\":\"baz\"}"},
     {"{\"a\": \"foo\", \"b\": \"bar\"}", "{\"b\": \"bar\"}", "{\"a\": \"foo\", \"c\": \"baz\"}",
      "{\"a\":\"foo\", \"b\":\"bar\", \"c\":\"baz\", \"d\":\"qux\"}"}},
    {"required props",
     "{\"$schema\": \"https://json-schema.org/draft/2020-12/schema\", \"$id\": \"https://example.com/product.schema.json\","
     " \"title\": \"Product\", \"description\": \"A product from Acme's catalog\", \"type\": \"object\", \"properties\": {"
     "\"productId\": {\"description\": \"The unique identifier for a product\", \"type\": \"integer\"},"
     "\"productName\": {\"description\": \"Name of the product\", \"type\": \"string\"},"
     "\"price\": {\"description\": \"The price of the product\", \"type\": \"number\"},"
     "\"tags\": {\"description\": \"Tags for the product\", \"type\": \"array\", \"items\": {\"type\": \"string\"}, "
     "\"minItems\": 1},"
     "\"dimensions\": {\"type\": \"object\", \"properties\": {\"length\": {\"type\": \"number\"}, \"width\": "
     "{\"type\": \"number\"}, \"height\": {\"type\": \"number\"}}, \"required\": [ \"length\", \"width\", \"height\" ]}},"
     "\"required\": [ \"productId\", \"productName\", \"price\" ]}",
     {"{\"productId\": 1, \"productName\": \"A green door\", \"price\": 12.50}",
      "{\"productId\": 1, \"productName\": \"A green door\", \"price\": 12.50, \"tags\": [\"home\", \"green\"]}",
      "{\"productId\": 1, \"productName\": \"A green door\", \"price\": 12.50, \"tags\": [\"home\", \"green\"], "
      "\"dimensions\": {\"length\": 785, \"width\": 250.5, \"height\": -0.359}}"},
     {"{}", "{\"productName\": \"A green door\", \"price\": 12.50, \"productId\": 1}",
      "{\"productId\": 1, \"productName\": \"A green door\"}", "{\"productName\": \"A green door\", \"price\": 12.50}",
      "{\"productId\": 1, \"productName\": \"A green door\", \"price\": 12.50, \"tags\": []}",
      "{\"productId\": 1, \"productName\": \"A green door\", \"price\": 12.50, \"dimensions\": {\"length\": 785, "
      "\"width\": 250.5, \"height\": -0.359}, \"tags\": [\"home\", \"green\"]}"}},
};

// kvtier's own: the forms llama.cpp's converter writes (tests/test-json-schema-to-grammar.cpp's schemas, read as
// languages), recursion, and the corners of the conversion.
static const vec OWN[] = {
    {"min 0", "{\"type\":\"integer\",\"minimum\":0}", {"0", "7", "1234567890123456"}, {"-1", "01", "12345678901234567"}},
    {"min 25", "{\"type\":\"integer\",\"minimum\":25}", {"25", "99", "100", "1000000"}, {"24", "9", "0", "-25"}},
    {"max 30", "{\"type\":\"integer\",\"maximum\":30}", {"30", "0", "-5", "-1234567"}, {"31", "100", "-0"}},
    {"min -123 max 42", "{\"type\":\"integer\",\"minimum\":-123,\"maximum\":42}",
     {"-123", "-99", "-1", "0", "42", "9"}, {"-124", "43", "100", "-200"}},
    {"min -10 max 10", "{\"type\":\"integer\",\"minimum\":-10,\"maximum\":10}", {"-10", "10", "0", "-0"},
     {"11", "-11", "010"}},
    {"min 15 max 300", "{\"type\":\"integer\",\"minimum\":15,\"maximum\":300}", {"15", "99", "100", "299", "300"},
     {"14", "301", "1000", "5"}},
    {"exclusive bounds, fractions rounded in", "{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10.5}",
     {"1", "10"}, {"0", "11", "-1"}},
    {"max -5 (llama.cpp's leading zeros below the top)", "{\"type\":\"integer\",\"maximum\":-5}",
     {"-5", "-6", "-100", "-05"}, {"-4", "5", "0"}},
    {"number", "{\"type\":\"number\"}", {"0", "-1.5", "1e10", "2.5E-3", "12.50"}, {"1.", ".5", "01", "+1", "--1"}},
    {"null", "{\"type\":\"null\"}", {"null"}, {"nul", "\"null\""}},
    {"string escapes", "{\"type\":\"string\"}", {"\"a\\\"b\\\\c\\n\\u00e9\"", "\"\xc3\xa9\""},
     {"\"a\"b\"", "\"\\x\"", "\"\x01\"", "\"\\u00g0\""}},
    {"date", "{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\"", "\"1999-12-31\""},
     {"\"2024-13-01\"", "\"2024-00-10\"", "\"24-01-01\""}},
    {"time and date-time",
     "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\",\"format\":\"time\"},{\"format\":\"date-time\"}]}",
     {"[\"23:59:59Z\", \"2024-01-01T00:00:00.000+05:30\"]"}, {"[\"24:00:00Z\", \"2024-01-01T00:00:00Z\"]",
      "[\"12:00:00\", \"2024-01-01T00:00:00Z\"]"}},
    {"uuid", "{\"type\":\"string\",\"format\":\"uuid\"}", {"\"12345678-1234-1234-1234-1234567890ab\""},
     {"\"12345678-1234-1234-1234-1234567890a\"", "\"g2345678-1234-1234-1234-1234567890ab\""}},
    {"whitespace where llama.cpp allows it", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
     "\"items\":{\"type\":\"integer\"}}},\"required\":[\"a\"]}",
     {"{\"a\":[1,2]}", "{ \"a\" : [ 1, 2 ] }", "{\n  \"a\":\n\t[1,\n 2\n]\n}"},
     {" {\"a\":[1]}", "{\"a\":[1]} ", "{\"a\":[1 ,2]}", "{\"a\":[1] , \"b\":1}", "{\"a\":[1]\n\n\n}"}},
    {"any object", "{\"type\":\"object\"}", {"{}", "{\"a\": {\"b\": [1, null, \"x\"]}}"},
     {"[]", "{\"a\" : 1}", "{\"a\"}"}},
    {"additional props schema", "{\"type\":\"object\",\"properties\":{\"and\":{\"type\":\"number\"},"
     "\"also\":{\"type\":\"number\"}},\"required\":[\"and\"],\"additionalProperties\":{\"type\":\"number\"}}",
     {"{\"and\": 1}", "{\"and\": 1, \"also\": 2}", "{\"and\": 1, \"alsoo\": 2, \"andy\": 3}", "{\"and\": 1, \"x\": 2, \"y\": 3}"},
     // llama.cpp's key rule also excludes a name's proper prefixes ("al")
     {"{\"and\": 1, \"and\": 2}", "{\"and\": 1, \"al\": 2}", "{\"and\": 1, \"also\": 2, \"also\": 3}", "{\"and\": 1, \"x\": \"s\"}", "{}"}},
    {"optional props, each at most once, in order",
     "{\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"string\"}},"
     "\"additionalProperties\":false}",
     {"{}", "{\"b\":\"\"}", "{\"a\":\"\",\"c\":\"\"}", "{\"a\":\"\",\"b\":\"\",\"c\":\"\"}"},
     {"{\"c\":\"\",\"a\":\"\"}", "{\"a\":\"\",\"a\":\"\"}", "{,}", "{\"a\":\"\",}"}},
    {"tree ($ref cycle through an object)",
     "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
     "\"additionalProperties\":false}}}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}"},
     {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}", "{\"v\":1,\"kids\":[{\"v\":\"x\"}]}"}},
    {"definitions and anyOf", "{\"anyOf\":[{\"$ref\":\"#/definitions/foo\"},{\"$ref\":\"#/definitions/bar\"}],"
     "\"definitions\":{\"foo\":{\"properties\":{\"a\":{\"type\":\"number\"}}},\"bar\":{\"properties\":{\"b\":"
     "{\"type\":\"number\"}}}},\"type\":\"object\"}",
     {"{}", "{\"a\": 1}", "{\"b\": 2}"}, {"{\"a\": 1, \"b\": 2}", "{\"c\": 1}", "null"}},
    {"oneOf with null (pydantic Optional)",
     "{\"oneOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}],\"default\":null,\"title\":\"X\"}",
     {"\"ab\"", "null", "\"\""}, {"\"abc\"", "1"}},
    {"allOf merge (every property of a direct component required, anyOf ones optional)",
     "{\"allOf\":[{\"$ref\":\"#/definitions/foo\"},{\"$ref\":\"#/definitions/bar\"},{\"anyOf\":[{\"$ref\":"
     "\"#/definitions/baz\"},{\"$ref\":\"#/definitions/bam\"}]}],\"definitions\":{\"foo\":{\"properties\":{\"a\":"
     "{\"type\":\"number\"}}},\"bar\":{\"properties\":{\"b\":{\"type\":\"number\"}}},\"bam\":{\"properties\":{\"c\":"
     "{\"type\":\"number\"}}},\"baz\":{\"properties\":{\"d\":{\"type\":\"number\"}}}},\"type\":\"object\"}",
     {"{\"a\":1,\"b\":2}", "{\"a\":1,\"b\":2,\"d\":3,\"c\":4}", "{\"a\":1,\"b\":2,\"c\":4}"},
     {"{\"a\":1}", "{\"b\":2,\"a\":1}", "{\"a\":1,\"b\":2,\"c\":4,\"d\":3}"}},
    {"allOf enums intersect", "{\"allOf\":[{\"enum\":[\"a\",\"b\",\"c\"]},{\"enum\":[\"b\",\"c\",\"d\"]}]}",
     {"\"b\"", "\"c\""}, {"\"a\"", "\"d\""}},
    {"const and enum texts as nlohmann dumps them",
     "{\"enum\":[{\"k\":[1,\"\\u00e9\\n\"]},1.5e-7,3.0,1e20,0.1,\"a\\\"\\\\/\"]}",
     {"{\"k\":[1,\"\xc3\xa9\\n\"]}", "1.5e-07", "3.0", "1e+20", "0.1", "\"a\\\"\\\\/\""},
     {"{\"k\": [1,\"\xc3\xa9\\n\"]}", "1.5e-7", "3", "1e20", "\"a\\\"\\\\\\/\""}},
    {"type array with const", "{\"type\":[\"string\",\"null\"],\"enum\":[\"x\",null]}", {"\"x\"", "null"},
     {"\"y\"", "\"null\""}},
    {"tuple", "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}],\"minItems\":2}",
     {"[1, true]", "[ -3,false ]"}, {"[1]", "[1, true, 2]", "[true, 1]"}},
    {"maxItems 0", "{\"items\":{\"type\":\"boolean\"},\"maxItems\":0}", {"[]", "[ ]"}, {"[true]"}},
    {"minItems 2 maxItems 3", "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0},\"minItems\":2,"
     "\"maxItems\":3}",
     {"[0,1]", "[1, 2, 3]"}, {"[1]", "[1,2,3,4]", "[-1,2]", "[]"}},
    {"pattern", "{\"type\":\"string\",\"pattern\":\"^(\\\\([0-9]{1,3}\\\\))?[0-9]{3}-[0-9]{4} a{3,5}nd...$\"}",
     {"\"(123)456-7890 aaand...\"", "\"456-7890 aaaaandxyz\""}, {"\"456-7890 aand...\"", "\"(1234)456-7890 aaand...\""}},
    {"pattern alternation and groups", "{\"type\":\"string\",\"pattern\":\"^(?:foo|bar)baz[^x]?$\"}",
     {"\"foobaz\"", "\"barbazy\""}, {"\"bazbaz\"", "\"foobazx\"", "\"foo\""}},
    {"property names with class specials beside additionalProperties",
     "{\"type\":\"object\",\"properties\":{\"a]\\\\^-b\":{\"type\":\"integer\"}},\"additionalProperties\":true}",
     {"{\"a]\\\\^-b\": 1}", "{\"zz\": \"x\"}", "{\"a]\\\\^-bc\": null}"}, {"{\"a]\\\\^-b\": \"x\"}"}},
    {"true schema", "true", {"1", "[{}]"}, {"", "nul"}},
};

// Converts and compiles s; NULL after recording a failure.
static kvt_grammar *compile(const char *name, const char *s, char **text) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
    if (!j) {
        test_result(false, name, "schema does not parse: %s", je.text);
        return NULL;
    }
    kvt_err err = {0};
    kvt_status st = kvt_json_schema_to_grammar(j, "json_schema", text, &err);
    json_decref(j);
    if (st != KVT_OK) {
        test_result(false, name, "conversion: %s", err.msg);
        return NULL;
    }
    kvt_grammar *g = NULL;
    st = kvt_grammar_parse(*text, strlen(*text), "root", NULL, &g, &err);
    if (st != KVT_OK) {
        test_result(false, name, "grammar: %s\n%s", err.msg, *text);
        free(*text);
        *text = NULL;
        return NULL;
    }
    return g;
}

static int run_vectors(const char *suite, const vec *v, size_t n) {
    int checked = 0;
    for (size_t i = 0; i < n; i++) {
        char name[160], *text = NULL;
        snprintf(name, sizeof name, "json_schema.%s: %s", suite, v[i].name);
        kvt_grammar *g = compile(name, v[i].schema, &text);
        if (!g) continue;
        bool ok = true;
        char why[KVT_ERR_MSG_MAX + 256] = "";
        for (int pass = 0; pass < 2; pass++) {
            const char *const *set = pass ? v[i].fail : v[i].pass;
            for (int k = 0; k < 12 && set[k]; k++) {
                bool complete = false;
                kvt_err err = {0};
                kvt_status st = kvt_grammar_match(g, set[k], strlen(set[k]), &complete, &err);
                checked++;
                if (st != KVT_OK || complete == (bool)pass) {
                    if (ok)
                        snprintf(why, sizeof why, "%s %s: %s", pass ? "accepted" : "refused", set[k],
                                 st != KVT_OK ? err.msg : "");
                    ok = false;
                }
            }
        }
        test_result(ok, name, "%s\n%s", why, text);
        kvt_grammar_free(g);
        free(text);
    }
    return checked;
}

// Exact text for two of llama.cpp's expectations (tests/test-json-schema-to-grammar.cpp): the same rules.
static void test_text(void) {
    static const struct {
        const char *schema, *grammar;
    } T[] = {
        {"{\"type\":\"integer\",\"minimum\":-123,\"maximum\":42}",
         "root ::= (\"-\" ([0-9] | ([1-8] [0-9] | [9] [0-9]) | \"1\" ([0-1] [0-9] | [2] [0-3])) | [0-9] | ([1-3] [0-9] "
         "| [4] [0-2]))\nspace ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
        {"{\"properties\":{\"b\":{\"type\":\"string\"},\"a\":{\"type\":\"string\"},\"d\":{\"type\":\"string\"},"
         "\"c\":{\"type\":\"string\"}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}",
         "a-kv ::= \"\\\"a\\\"\" space \":\" space string\nb-kv ::= \"\\\"b\\\"\" space \":\" space string\n"
         "c-kv ::= \"\\\"c\\\"\" space \":\" space string\nchar ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | "
         "\"u\" [0-9a-fA-F]{4})\nd-kv ::= \"\\\"d\\\"\" space \":\" space string\nd-rest ::= ( \",\" space c-kv )?\n"
         "root ::= \"{\" space b-kv \",\" space a-kv ( \",\" space ( d-kv d-rest | c-kv ) )? space \"}\"\n"
         "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\nstring ::= \"\\\"\" char* \"\\\"\"\n"},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        json_t *j = json_loads(T[i].schema, 0, NULL);
        char *text = NULL;
        kvt_err err = {0};
        kvt_status st = kvt_json_schema_to_grammar(j, "json_schema", &text, &err);
        char name[64];
        snprintf(name, sizeof name, "json_schema.text %zu (llama.cpp's rules)", i);
        test_result(st == KVT_OK && text && !strcmp(text, T[i].grammar), name, "%s", st ? err.msg : text);
        free(text);
        json_decref(j);
    }
}

// Refusals: the message names the path and the keyword.
static void test_errors(void) {
    static const struct {
        const char *schema, *msg;
    } E[] = {
        {"{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":\"x\"}}}",
         "json_schema.properties.age.minimum: must be a number"},
        {"{\"properties\":{\"x\":{\"type\":\"string\",\"pattern\":\"^\\\\w+$\"}}}",
         "json_schema.properties.x.pattern: not supported by kvtier"},
        {"{\"type\":\"string\",\"pattern\":\"[0-9]+\"}", "json_schema.pattern: not supported by kvtier"},
        {"{\"type\":\"string\",\"pattern\":\"^(?=a)a$\"}", "json_schema.pattern: not supported by kvtier"},
        {"{\"type\":\"string\",\"pattern\":\"^(a$\"}", "json_schema.pattern: not supported by kvtier"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "json_schema.exclusiveMinimum: not supported by kvtier"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}",
         "json_schema.uniqueItems: not supported by kvtier"},
        {"{\"type\":\"kaboom\"}", "json_schema.type: unrecognized type 'kaboom'"},
        {"{\"type\":123}", "json_schema.type: must be a string or an array of strings"},
        {"{\"not\":{\"type\":\"null\"}}", "json_schema.not: not supported by kvtier"},
        {"{\"minimum\":3}", "json_schema.minimum: not supported by kvtier"},
        {"{\"$ref\":\"#/$defs/a\",\"maxLength\":3,\"$defs\":{\"a\":{\"type\":\"string\"}}}",
         "json_schema.maxLength: not supported by kvtier beside $ref/anyOf/oneOf"},
        {"{\"$ref\":\"#/$defs/missing\"}", "json_schema.$ref: cannot resolve '#/$defs/missing'"},
        {"{\"$ref\":\"https://example.com/s.json\"}", "json_schema.$ref: 'https://example.com/s.json' not supported"},
        {"{\"$defs\":{\"x\":{\"anyOf\":[{\"$ref\":\"#/$defs/x\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/x\"}",
         "json_schema.$defs.x.anyOf.0.$ref: '#/$defs/x' refers back to itself"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "json_schema.$defs.a.$ref: '#/$defs/a'"},
        {"{\"type\":\"array\",\"minItems\":5000}", "json_schema.minItems: 5000 is more than the 2000 repetitions"},
        {"{\"type\":\"string\",\"maxLength\":100000}", "json_schema.maxLength: 100000 is more than the 2000"},
        {"{\"type\":\"string\",\"pattern\":\"^a{1,5000}$\"}", "json_schema.pattern: a repetition over 2000"},
        {"{\"type\":\"integer\",\"minimum\":1e30}", "json_schema.minimum: out of the range kvtier supports"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}", "json_schema: no integer within minimum 5 and maximum 3"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "json_schema.minItems: greater than maxItems"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}",
         "json_schema.required: 'b' is not among the properties"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"minLength\":2}]}", "json_schema.allOf.0: not supported by kvtier in allOf"},
        {"{\"allOf\":[{\"enum\":[1]},{\"enum\":[2]}]}", "json_schema.allOf: the enums have no value in common"},
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}", "json_schema.enum.1: not of the schema's type"},
        {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"type\":\"string\"}",
         "json_schema.type: not supported by kvtier"},
        {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":5}", "json_schema.maxLength: not supported by kvtier"},
        {"{\"properties\":{\"a\":false}}", "json_schema.properties.a: the schema false is not supported"},
        {"false", "response_format.json_schema.schema: must be a JSON schema object"},
        {"[1]", "response_format.json_schema.schema: must be a JSON schema object"},
    };
    int bad = 0;
    char first[2 * KVT_ERR_MSG_MAX + 512] = "";
    for (size_t i = 0; i < sizeof E / sizeof *E; i++) {
        json_t *j = json_loads(E[i].schema, JSON_DECODE_ANY, NULL);
        char *text = NULL;
        kvt_err err = {0};
        const char *where = !strncmp(E[i].msg, "response_format", 15) ? "response_format.json_schema.schema" : "json_schema";
        kvt_status st = kvt_json_schema_to_grammar(j, where, &text, &err);
        if (st != KVT_ERR_INVALID_ARG || text || strncmp(err.msg, E[i].msg, strlen(E[i].msg))) {
            if (!bad++)
                snprintf(first, sizeof first, "%s: status %d, got '%s', want '%s...'", E[i].schema, (int)st,
                         st ? err.msg : "(converted)", E[i].msg);
        }
        free(text);
        json_decref(j);
    }
    test_result(!bad, "json_schema.errors (path and keyword named)", "%d of %zu wrong; first: %s", bad,
                sizeof E / sizeof *E, first);
}

// Hostile schemas: bounded work, an error or a bounded grammar, never a crash.
static void test_hostile(void) {
    char name[] = "json_schema.hostile (deep nesting, $ref chains, wide enums)";
    bool ok = true;
    char why[KVT_ERR_MSG_MAX + 64] = "";
    // 1000 nested arrays (jansson parses up to 2048 levels)
    size_t n = 1000;
    char *deep = malloc(n * 12 + 16);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(deep + k, "{\"items\":");
    k += (size_t)sprintf(deep + k, "{}");
    for (size_t i = 0; i < n; i++) deep[k++] = '}';
    deep[k] = 0;
    json_error_t je;
    json_t *j = json_loads(deep, 0, &je); // jansson may refuse the depth itself
    char *text = NULL;
    kvt_err err = {0};
    if (j && (kvt_json_schema_to_grammar(j, "json_schema", &text, &err) != KVT_ERR_INVALID_ARG ||
              !strstr(err.msg, "nested more than")))
        ok = false, snprintf(why, sizeof why, "deep: %s", err.msg);
    free(text);
    text = NULL;
    json_decref(j);
    free(deep);
    // a $ref chain a0 -> a1 -> ... -> a199
    json_t *defs = json_object();
    for (int i = 0; i < 200; i++) {
        char key[16], ref[32];
        snprintf(key, sizeof key, "a%d", i);
        snprintf(ref, sizeof ref, "#/$defs/a%d", i + 1);
        json_object_set_new(defs, key, i < 199 ? json_pack("{ss}", "$ref", ref) : json_pack("{ss}", "type", "null"));
    }
    j = json_pack("{sssO}", "$ref", "#/$defs/a0", "$defs", defs);
    json_decref(defs);
    if (kvt_json_schema_to_grammar(j, "json_schema", &text, &err) != KVT_ERR_INVALID_ARG)
        ok = false, snprintf(why, sizeof why, "chain converted");
    free(text);
    text = NULL;
    json_decref(j);
    // 5000 enum values: converted, and the grammar compiles and matches (20000 would exceed the matcher's
    // default 10000 parse stacks: a status at match time, as the stack bound promises)
    json_t *e = json_array();
    for (int i = 0; i < 5000; i++) json_array_append_new(e, json_integer(i * 7));
    j = json_pack("{so}", "enum", e);
    if (kvt_json_schema_to_grammar(j, "json_schema", &text, &err) != KVT_OK)
        ok = false, snprintf(why, sizeof why, "enum: %s", err.msg);
    else {
        kvt_grammar *g = NULL;
        bool complete = false;
        if (kvt_grammar_parse(text, strlen(text), "root", NULL, &g, &err) != KVT_OK ||
            kvt_grammar_match(g, "34993", 5, &complete, &err) != KVT_OK || !complete)
            ok = false, snprintf(why, sizeof why, "enum grammar: %s", err.msg);
        kvt_grammar_free(g);
    }
    free(text);
    json_decref(j);
    test_result(ok, name, "%s", why);
}

void test_json_schema(const test_env *env) {
    (void)env;
    int n = run_vectors("llama.cpp", LLAMA, sizeof LLAMA / sizeof *LLAMA);
    n += run_vectors("kvtier", OWN, sizeof OWN / sizeof *OWN);
    test_result(n > 250, "json_schema.vectors counted", "%d strings checked", n);
    test_text();
    test_errors();
    test_hostile();
}

#else
void test_json_schema(const test_env *env) {
    (void)env;
    test_skip("json_schema", "built without libjansson (apt-get install libjansson-dev)");
}
#endif
