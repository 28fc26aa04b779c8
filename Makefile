# micropp: `make` builds ./micropp (installing missing packages first), `make run` trains the
# course's main job, `make test` runs every test. `make CUDA=0` forces a CPU-only build; with CUDA
# found, `make test` also builds the CPU-only ./micropp-cpu. `make DEPS=0` skips the package probe.
SHELL := /bin/bash
CC := mpicc
OPT ?= -O3 -march=native -fno-math-errno
CFLAGS ?= $(OPT)
# WERROR= turns warnings back into warnings (bench/gpu.sh: a GPU image's compiler this tree has never met).
WERROR ?= -Werror
comma := ,
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) -MMD -MP -I. -I/usr/include/x86_64-linux-gnu/openblas-pthread
LDLIBS := -lopenblas -lcjson -lz -lm
# The commands and the core at the root; below them, the run's phases in train/, the axes of
# parallelism in axes/, the planner in planner/, the communication layer in comms/ and the
# foundations (no MPI, no model, no schedule) in base/. tests/shape.py holds the floors.
CMD_SRCS := micropp.c train.c bubble.c plan_cmd.c pingpong.c allreduce.c selftest.c plot.c
CORE_SRCS := comms.c model.c moe.c schedule.c schedule_v.c schedule_file.c schedule_auto.c p2p.c
COMMS_SRCS := $(addprefix comms/,hardware.c messages.c collectives.c alltoall.c ring.c hier.c shm.c launch.c slurm.c watchdog.c finalize.c)
TRAIN_SRCS := $(addprefix train/,plan.c options.c measure.c executor.c verify.c report.c report_json.c checkpoint.c \
                                 trace.c metrics.c live.c guard.c manifest.c postval.c)
AXES_SRCS := $(addprefix axes/,degrees.c pipeline.c data.c zero.c tensor.c localsgd.c expert.c compress.c lowrank.c)
PLANNER_SRCS := $(addprefix planner/,memory.c cost.c calibrate.c predict.c auto.c price.c cache.c table.c validate.c)
BASE_SRCS := $(addprefix base/,util.c config.c suggest.c data.c idx.c safetensors.c fault.c outfile.c ops_cpu.c ops_onednn.c svg.c \
                               det.c)
SRCS := $(CMD_SRCS) $(CORE_SRCS) $(COMMS_SRCS) $(TRAIN_SRCS) $(AXES_SRCS) $(PLANNER_SRCS) $(BASE_SRCS)
BUILD ?= build

# Packages first: what a fresh machine lacks is installed (the deps target below) before this file
# looks for libraries with $(wildcard), so the first `make` on a bare Debian builds the full program.
ifneq ($(DEPS),0)
ifndef MICROPP_DEPS_DONE
  $(shell $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) deps MICROPP_DEPS_DONE=1 >&2)
  export MICROPP_DEPS_DONE := 1
endif
endif

# ---- oneDNN: the CPU's bf16 matrix products (--precision bf16); make deps installs libdnnl-dev.
# Without it (or with ONEDNN=0) ops_onednn.c builds as stubs and --precision bf16 is refused.
ONEDNN_INC := $(wildcard /usr/include/oneapi/dnnl/dnnl.h)
ONEDNN ?= $(if $(ONEDNN_INC),1,0)
ifeq ($(ONEDNN),1)
  LDLIBS += -ldnnl -lgomp
else
  CFLAGS += -DMICROPP_NO_ONEDNN
endif

# ---- optional GPU support: detected, reported, and switchable with CUDA=0/1 ----
# The toolkit is the first of CUDA_HOME=DIR, the folder above the nvcc on PATH, /usr/local/cuda that
# has include/cuda_runtime.h and bin/nvcc: an nvcc on PATH may be a wrapper script (/usr/local/bin/nvcc
# exec'ing the real one), whose folder holds no headers or libraries.
NVCC_ON_PATH := $(shell command -v nvcc 2>/dev/null)
CUDA_HOME := $(firstword $(foreach d,$(CUDA_HOME) $(patsubst %/bin/nvcc,%,$(NVCC_ON_PATH)) /usr/local/cuda,\
               $(if $(and $(wildcard $(d)/include/cuda_runtime.h),$(wildcard $(d)/bin/nvcc)),$(d))))
NVCC := $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc)
# cuBLAS: with the toolkit, or CUBLAS_HOME=DIR (DIR/include/cublas_v2.h, DIR/lib/libcublas.so*).
CUBLAS_INC := $(firstword $(wildcard $(if $(CUBLAS_HOME),$(CUBLAS_HOME)/include/cublas_v2.h) $(CUDA_HOME)/include/cublas_v2.h))
CUBLAS_LIB := $(firstword $(wildcard $(if $(CUBLAS_HOME),$(CUBLAS_HOME)/lib/libcublas.so $(CUBLAS_HOME)/lib/libcublas.so.13) $(CUDA_HOME)/lib64/libcublas.so))
HAVE_CUBLAS := $(if $(and $(CUDA_HOME),$(CUBLAS_INC),$(CUBLAS_LIB)),1,)
# NCCL: with the toolkit, the system, or NCCL_HOME=DIR (DIR/include/nccl.h, DIR/lib/libnccl.so*;
# e.g. the nvidia-nccl Python wheel's folder). Linked by its path, so a versioned .so is enough.
NCCL_INC := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL_LIB := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib/libnccl.so.2) $(CUDA_HOME)/lib64/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so))
HAVE_NCCL := $(if $(and $(NCCL_INC),$(NCCL_LIB)),1,)
CUDA ?= $(if $(and $(NVCC),$(HAVE_CUBLAS),$(HAVE_NCCL),$(wildcard kernels.cu)),1,0)
# sm_80 (A100) and sm_90 (H100/H200) machine code, plus sm_90 PTX that newer GPUs compile at load.
# -fmad=false: no fused multiply-adds, so the element-wise kernels round exactly as the CPU loops.
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -I. -O3 -std=c++17 -fmad=false $(NVCC_ARCH) $(if $(WERROR),--Werror all-warnings) \
             -Xcompiler -Wall,-Wextra$(if $(WERROR),$(comma)-Werror)
ifeq ($(CUDA),1)
  GPU_OBJS := $(BUILD)/kernels.o $(BUILD)/nccl.o
  NVCCFLAGS += -I$(dir $(CUBLAS_INC)) -I$(dir $(NCCL_INC))
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(CUBLAS_LIB) -Wl,-rpath,$(dir $(CUBLAS_LIB)) \
            $(NCCL_LIB) -Wl,-rpath,$(dir $(NCCL_LIB)) -lcudart -lstdc++
else
  GPU_OBJS := $(BUILD)/cuda_stub.o
endif
OBJS := $(SRCS:%.c=$(BUILD)/%.o) $(GPU_OBJS)

.PHONY: all deps deps-slurm features run test asan test-asan fuzz clean bench
all: micropp

# Installs what a fresh Debian 12 lacks (compiler, MPICH, cJSON, OpenBLAS, zlib, oneDNN, the Fashion-MNIST
# data set that --data fashion-mnist reads; for make test python3, cppcheck, iproute2's ip and tc for the
# network-namespace tests and /usr/bin/time for peak memory), only when a probe shows it missing;
# uses sudo when not root. DEPS=0 skips it (packages unpacked elsewhere, as on a GPU machine without
# registries: see bench/gpu.sh).
# tests/bare-machine.sh checks, in a minbase chroot, that this is all a bare machine needs.
DEPS ?= 1
deps:
	@[ "$(DEPS)" = 0 ] && exit 0; missing=""; \
	command -v gcc >/dev/null || missing="$$missing gcc libc6-dev"; \
	command -v mpicc >/dev/null && command -v mpiexec >/dev/null || missing="$$missing mpich libmpich-dev"; \
	test -f /usr/include/cjson/cJSON.h || missing="$$missing libcjson-dev"; \
	test -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h || missing="$$missing libopenblas-dev"; \
	test -f /usr/include/zlib.h || missing="$$missing zlib1g-dev"; \
	test -f /usr/include/oneapi/dnnl/dnnl.h || missing="$$missing libdnnl-dev"; \
	test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz || missing="$$missing dataset-fashion-mnist"; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	command -v cppcheck >/dev/null || missing="$$missing cppcheck"; \
	command -v ip >/dev/null && command -v tc >/dev/null || missing="$$missing iproute2"; \
	test -x /usr/bin/time || missing="$$missing time"; \
	command -v rsvg-convert >/dev/null || missing="$$missing librsvg2-bin"; \
	if [ -n "$$missing" ]; then \
	  echo "micropp: installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "micropp: apt-get install$$missing failed"; exit 1; }; \
	fi

# Slurm and munge for tests/t_slurm.sh, which starts a throwaway cluster on this machine and needs
# root for it (it skips, saying why, otherwise): `make test` installs them through this target, as
# root only, and only when one is missing; plain `make` never does, nor does DEPS=0. The packages'
# own services are not started (a policy-rc.d that says so, for the install, where the machine has
# none: a container's usually has): the test starts its own daemons on private ports and a private
# socket. A failed install does not stop `make test`: t_slurm.sh then skips, naming what is missing.
SLURM_PKGS := slurmctld:/usr/sbin/slurmctld slurmd:/usr/sbin/slurmd slurm-client:/usr/bin/srun munge:/usr/sbin/munged
deps-slurm:
	@[ "$(DEPS)" != 0 ] && [ "$$(id -u)" = 0 ] || exit 0; missing=""; \
	for p in $(SLURM_PKGS); do test -x "$${p#*:}" || missing="$$missing $${p%%:*}"; done; \
	[ -n "$$missing" ] || exit 0; \
	echo "micropp: installing for tests/t_slurm.sh:$$missing slurm-wlm-basic-plugins"; \
	policy=""; \
	if [ ! -e /usr/sbin/policy-rc.d ]; then \
	  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && policy=1; \
	fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  $$missing slurm-wlm-basic-plugins >/dev/null; rc=$$?; \
	[ -z "$$policy" ] || rm -f /usr/sbin/policy-rc.d; \
	[ $$rc = 0 ] || echo "micropp: apt-get install$$missing failed: tests/t_slurm.sh will skip"

features:
	@echo "micropp build: MPI (mpicc): $$(command -v mpicc >/dev/null && echo found || echo not found)"
	@echo "micropp build: OpenBLAS: $$(test -f /usr/lib/x86_64-linux-gnu/libopenblas.so && echo found || echo not found)"
	@echo "micropp build: oneDNN (bf16 on the CPU): $(if $(filter 1,$(ONEDNN)),found,not found$(if $(ONEDNN_INC), (switched off: ONEDNN=0)))"
	@echo "micropp build: CUDA (nvcc): $(if $(NVCC),found at $(CUDA_HOME),not found$(if $(NVCC_ON_PATH), (nvcc on PATH at $(NVCC_ON_PATH), but no toolkit with include/cuda_runtime.h there or in /usr/local/cuda: set CUDA_HOME=DIR)))"
	@echo "micropp build: cuBLAS: $(if $(HAVE_CUBLAS),found ($(CUBLAS_LIB)),not found)"
	@echo "micropp build: NCCL: $(if $(HAVE_NCCL),found ($(NCCL_LIB)),not found)"
	@echo "micropp build: GPU support: $(if $(filter 1,$(CUDA)),on,off (CPU only))"

micropp: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)
	@$(MAKE) --no-print-directory features

$(BUILD)/%.o: %.c | deps $(BUILD)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The CUDA build: the backend of ops.h (kernels.cu) and the NCCL transport of comms/devcomm.h (nccl.cu).
$(BUILD)/kernels.o: kernels.cu kernels.h base/ops.h base/ops_math.h base/util.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/nccl.o: nccl.cu kernels.h comms/devcomm.h base/util.h | $(BUILD)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The CPU-only twin of a GPU-enabled build (make test runs its checks too).
ifeq ($(BUILD),build-cpu)
micropp-cpu: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)
else
.PHONY: micropp-cpu
micropp-cpu:
	@$(MAKE) --no-print-directory CUDA=0 BUILD=build-cpu micropp-cpu
endif

$(BUILD):
	@mkdir -p $(BUILD)

# The course's main job: a 2-rank 1F1B pipeline on the default config.
run: micropp
	mpiexec -n 2 ./micropp train --mode pp --schedule 1f1b --micro-batches 8

# Unit tests: tests/unit_*.c linked against every object but main's.
LIB_OBJS := $(filter-out $(BUILD)/micropp.o,$(OBJS))
UNIT_DIR ?= tests/bin
UNIT_BINS := $(patsubst tests/%.c,$(UNIT_DIR)/%,$(wildcard tests/unit_*.c))
# MPI test programs (tests/mpi_*.c): built the same way into tests/bin, run under mpiexec by the tests/t_*.sh scripts.
MPI_TEST_BINS := $(patsubst tests/%.c,tests/bin/%,$(wildcard tests/mpi_*.c))
$(UNIT_DIR)/%: tests/%.c tests/unit.h tests/sim_helpers.h $(LIB_OBJS) | deps
	@mkdir -p $(UNIT_DIR)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)

# Fuzz targets (tests/fuzz/fuzz_*.c) replayed over their seeds and kept crash inputs by a plain
# driver, so `make test` needs no clang; built with ASan+UBSan when the compiler has them.
FUZZ_TARGETS := config npy safetensors
FUZZ_SRCS_config := base/config.c base/suggest.c train/options.c
# train/options.c names the choices' enums, declared in headers that include mpi.h (nothing is called)
MPI_INC = $(shell mpicc -show 2>/dev/null | grep -o -- '-I[^ ]*')
FUZZ_SRCS_npy := base/data.c base/idx.c
FUZZ_SRCS_safetensors := base/safetensors.c
REPLAY_CC ?= gcc
REPLAY_SAN := $(shell echo 'int main(void){return 0;}' | $(REPLAY_CC) -fsanitize=address,undefined -x c - -o /dev/null 2>/dev/null && echo -fsanitize=address,undefined -fno-sanitize-recover=all)
REPLAY_BINS := $(FUZZ_TARGETS:%=tests/bin/replay_%)
.SECONDEXPANSION:
tests/bin/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c tests/fuzz/fuzz_stubs.h $$(FUZZ_SRCS_$$*) $(wildcard *.h base/*.h comms/*.h train/*.h axes/*.h planner/*.h) | deps
	@mkdir -p tests/bin
	$(REPLAY_CC) -std=c11 -D_GNU_SOURCE -g -O1 $(REPLAY_SAN) -Wall -Wextra -Werror -I. $(MPI_INC) -o $@ $< tests/fuzz/replay_main.c $(FUZZ_SRCS_$*) -lcjson -lz -lm

# Every test program but the fuzz replays (bench/gpu.sh builds these on a GPU machine, whose image may
# lack the sanitizers the replays are built with).
.PHONY: test-bins
test-bins: $(UNIT_BINS) $(MPI_TEST_BINS)

test: micropp $(UNIT_BINS) $(MPI_TEST_BINS) $(REPLAY_BINS) $(if $(filter 1,$(CUDA)),micropp-cpu) deps-slurm
	@bash tests/run.sh

# libFuzzer (clang) over each reader for FUZZ_SECONDS in all; new crash inputs land in
# tests/fuzz/regressions/TARGET/ (commit them once fixed: `make test` replays them).
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
fuzz: | deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz: $(FUZZ_CC) not found (apt-get install clang): nothing fuzzed"; exit 1; }
	@mkdir -p build-fuzz; status=0; per=$$(( $(FUZZ_SECONDS) / $(words $(FUZZ_TARGETS)) )); [ $$per -ge 1 ] || per=1; \
	for t in $(FUZZ_TARGETS); do \
	  srcs=$$(case $$t in config) echo "$(FUZZ_SRCS_config)";; npy) echo "$(FUZZ_SRCS_npy)";; safetensors) echo "$(FUZZ_SRCS_safetensors)";; esac); \
	  $(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. $(MPI_INC) \
	    -o build-fuzz/fuzz_$$t tests/fuzz/fuzz_$$t.c $$srcs -lcjson -lz -lm || exit 1; \
	  mkdir -p build-fuzz/corpus/$$t tests/fuzz/regressions/$$t; \
	  leaks=1; [ $$t = config ] && leaks=0; \
	  echo "make fuzz: $$t for $${per}s"; \
	  ASAN_OPTIONS=detect_leaks=$$leaks nice ./build-fuzz/fuzz_$$t -max_total_time=$$per -timeout=10 -rss_limit_mb=2048 -max_len=16384 -detect_leaks=$$leaks \
	    -print_final_stats=1 -artifact_prefix=tests/fuzz/regressions/$$t/ build-fuzz/corpus/$$t tests/fuzz/corpus/$$t \
	    > build-fuzz/$$t.log 2>&1 || { status=1; echo "make fuzz: $$t FAILED: input kept in tests/fuzz/regressions/$$t/ (log: build-fuzz/$$t.log)"; tail -30 build-fuzz/$$t.log; }; \
	  grep -E '^stat::number_of_executed_units|^Done' build-fuzz/$$t.log | tr '\n' ' '; echo; \
	done; exit $$status

# AddressSanitizer + UBSan build of the same sources, then the suite against it.
ASAN_OPT := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
asan:
	$(MAKE) BUILD=build-asan OPT="$(ASAN_OPT)" micropp-asan
micropp-asan: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)
# MPICH, UCX and hwloc keep allocations until exit: tests/lsan.supp silences those libraries only
# (full unwinding, so that leaks inside their dlopened plugins are traced back to them).
test-asan: $(REPLAY_BINS) $(MPI_TEST_BINS)
	$(MAKE) BUILD=build-asan OPT="$(ASAN_OPT)" UNIT_DIR=tests/bin-asan micropp-asan $(patsubst tests/%.c,tests/bin-asan/%,$(wildcard tests/unit_*.c))
	ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:allocator_may_return_null=1:abort_on_error=0 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	MICROPP=$(CURDIR)/micropp-asan UNIT_DIR=tests/bin-asan bash tests/run.sh

bench/sgemm: bench/sgemm.c $(LIB_OBJS) | deps
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)
bench/bf16gemm: bench/bf16gemm.c $(LIB_OBJS) | deps
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)
bench/gpu_sgemm: bench/gpu_sgemm.c $(LIB_OBJS) | deps
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)

bench: micropp bench/sgemm bench/bf16gemm
	bash bench/foundation.sh
	bash bench/pipeline.sh
	bash bench/schedules.sh

# ---- developer habits: static analysis and formatting ----
# make lint: cppcheck over every C source of ours (a wildcard: new files are linted without edits
# here); zero findings or it fails, and `make test` runs it (tests/t_lint.sh). A false positive is
# silenced where it occurs, with the reason: `// cppcheck-suppress ID ; why` on the line above.
# -D_Noreturn=...: cppcheck 2.10 (Debian 12) ignores C11 _Noreturn, so without it fatal(),
# user_error() and CHECK() look as if they returned (false double frees, out-of-bounds reads).
# kernels.cu and nccl.cu are left out: cppcheck does not parse CUDA (and as C++ it asks for C++ idioms).
# --check-level=exhaustive does not exist before cppcheck 2.11: the default depth is used.
CPPCHECK ?= cppcheck
LINT_SRCS := $(wildcard *.c base/*.c comms/*.c train/*.c axes/*.c planner/*.c tests/*.c tests/fuzz/*.c bench/*.c)
LINT_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
CPPCHECK_FLAGS ?= --enable=warning,style,performance,portability --std=c11 --inline-suppr --error-exitcode=1 -q \
	-I. -D_GNU_SOURCE '-D_Noreturn=__attribute__((noreturn))' --suppress=missingIncludeSystem -j $(LINT_JOBS) \
	--template='{file}:{line}:{column}: {severity}: {message} [{id}]'
# make format: clang-format -i over our sources, in the style of .clang-format (not run on the
# tree as a whole yet; format the files you touch). make format-check: which files it would change,
# and by how many lines (informational: exit 0).
CLANG_FORMAT ?= clang-format
FORMAT_SRCS := $(wildcard *.c *.h base/*.c base/*.h comms/*.c comms/*.h train/*.c train/*.h axes/*.c axes/*.h planner/*.c planner/*.h kernels.cu nccl.cu tests/*.c tests/*.h tests/fuzz/*.c tests/fuzz/*.h bench/*.c)
.PHONY: lint format format-check
lint: | deps
	@command -v $(CPPCHECK) >/dev/null || { echo "make lint: $(CPPCHECK) not found (apt-get install cppcheck)"; exit 1; }
	@$(CPPCHECK) $(CPPCHECK_FLAGS) $(LINT_SRCS) && echo "make lint: cppcheck $$($(CPPCHECK) --version | cut -d' ' -f2): no findings in $(words $(LINT_SRCS)) files"
format:
	@command -v $(CLANG_FORMAT) >/dev/null || { echo "make format: $(CLANG_FORMAT) not found (apt-get install clang-format)"; exit 1; }
	$(CLANG_FORMAT) -i $(FORMAT_SRCS)
format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || { echo "make format-check: $(CLANG_FORMAT) not found (apt-get install clang-format)"; exit 0; }; \
	files=0; lines=0; \
	for f in $(FORMAT_SRCS); do \
	  n=$$($(CLANG_FORMAT) "$$f" | diff "$$f" - | grep -c '^[<>]'); \
	  if [ "$$n" -gt 0 ]; then echo "$$f: $$n lines would change"; files=$$((files + 1)); lines=$$((lines + n)); fi; \
	done; \
	echo "make format-check: $$files of $(words $(FORMAT_SRCS)) files would change ($$lines diff lines); make format rewrites them"

clean:
	rm -rf build build-asan build-cpu build-fuzz micropp micropp-asan micropp-cpu tests/bin tests/bin-asan bench/sgemm bench/bf16gemm bench/gpu_sgemm

-include $(OBJS:.o=.d)
