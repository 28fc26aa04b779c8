# micropp: `make` builds ./micropp (installing missing packages first), `make run` trains the
# course's main job, `make test` runs every test. `make CUDA=0` forces a CPU-only build.
SHELL := /bin/bash
CC := mpicc
OPT ?= -O3 -march=native -fno-math-errno
CFLAGS ?= $(OPT)
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -MMD -MP -I/usr/include/x86_64-linux-gnu/openblas-pthread
LDLIBS := -lopenblas -lcjson -lm
SRCS := micropp.c config.c train.c bubble.c trace.c pingpong.c comms.c model.c schedule.c data.c ops_cpu.c checkpoint.c safetensors.c
BUILD ?= build

# ---- optional GPU support: detected, reported, and switchable with CUDA=0/1 ----
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),)
HAVE_CUBLAS := $(if $(wildcard $(CUDA_HOME)/lib64/libcublas.so),1,)
HAVE_NCCL := $(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),1,)
CUDA ?= $(if $(and $(NVCC),$(HAVE_CUBLAS),$(HAVE_NCCL),$(wildcard kernels.cu)),1,0)
ifeq ($(CUDA),1)
  GPU_OBJS := $(BUILD)/kernels.o
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart -lstdc++
else
  GPU_OBJS := $(BUILD)/cuda_stub.o
endif
OBJS := $(SRCS:%.c=$(BUILD)/%.o) $(GPU_OBJS)

.PHONY: all deps features run test asan clean bench
all: micropp

# Installs what a fresh Debian 12 lacks (compiler, MPICH, cJSON, OpenBLAS), only when a probe
# shows it missing; uses sudo when not root.
deps:
	@missing=""; \
	command -v gcc >/dev/null || missing="$$missing gcc libc6-dev"; \
	command -v mpicc >/dev/null && command -v mpiexec >/dev/null || missing="$$missing mpich libmpich-dev"; \
	test -f /usr/include/cjson/cJSON.h || missing="$$missing libcjson-dev"; \
	test -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h || missing="$$missing libopenblas-dev"; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	if [ -n "$$missing" ]; then \
	  echo "micropp: installing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	    || { echo "micropp: apt-get install$$missing failed"; exit 1; }; \
	fi

features:
	@echo "micropp build: MPI (mpicc): $$(command -v mpicc >/dev/null && echo found || echo not found)"
	@echo "micropp build: OpenBLAS: $$(test -f /usr/lib/x86_64-linux-gnu/libopenblas.so && echo found || echo not found)"
	@echo "micropp build: CUDA (nvcc): $(if $(NVCC),found at $(CUDA_HOME),not found)"
	@echo "micropp build: cuBLAS: $(if $(HAVE_CUBLAS),found,not found)"
	@echo "micropp build: NCCL: $(if $(HAVE_NCCL),found,not found)"
	@echo "micropp build: GPU support: $(if $(filter 1,$(CUDA)),on,off (CPU only))"

micropp: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)
	@$(MAKE) --no-print-directory features

$(BUILD)/%.o: %.c | deps $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels.o: kernels.cu ops.h ops_math.h | $(BUILD)
	$(NVCC) -O3 -std=c++17 -Xcompiler -Wall,-Werror -I/usr/include/x86_64-linux-gnu/mpich -c $< -o $@

$(BUILD):
	@mkdir -p $(BUILD)

# The course's main job: a 2-rank 1F1B pipeline on the default config.
run: micropp
	mpiexec -n 2 ./micropp train --mode pp --schedule 1f1b --micro-batches 8

# Unit tests: tests/unit_*.c linked against every object but main's.
LIB_OBJS := $(filter-out $(BUILD)/micropp.o,$(OBJS))
UNIT_BINS := $(patsubst tests/%.c,tests/bin/%,$(wildcard tests/unit_*.c))
tests/bin/%: tests/%.c tests/unit.h $(LIB_OBJS) | deps
	@mkdir -p tests/bin
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)

test: micropp $(UNIT_BINS)
	@bash tests/run.sh

# AddressSanitizer + UBSan build of the same sources, then the suite against it.
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" micropp-asan
micropp-asan: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)

bench/sgemm: bench/sgemm.c $(LIB_OBJS) | deps
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)

bench: micropp bench/sgemm
	bash bench/foundation.sh
	bash bench/pipeline.sh

clean:
	rm -rf build build-asan micropp micropp-asan tests/bin bench/sgemm

-include $(OBJS:.o=.d)
