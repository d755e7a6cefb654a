// test_prefix_store_redis.c - the Redis half of the prefix_store suite.
#include "test_prefix_store.h"

void tps_redis_tests(const test_env *env) {
    (void)env;
    test_skip("prefix_store redis", "not written yet");
}
