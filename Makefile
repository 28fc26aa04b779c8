# micropp: `make` builds ./micropp (installing missing packages first), `make run` trains the
# course's main job, `make test` runs every test. `make CUDA=0` forces a CPU-only build; with CUDA
# found, `make test` also builds the CPU-only ./micropp-cpu. `make DEPS=0` skips the package probe.
SHELL := /bin/bash
CC := mpicc
OPT ?= -O3 -march=native -fno-math-errno
CFLAGS ?= $(OPT)
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -MMD -MP -I/usr/include/x86_64-linux-gnu/openblas-pthread
LDLIBS := -lopenblas -lcjson -lm
SRCS := micropp.c config.c train.c bubble.c trace.c pingpong.c selftest.c comms.c ddp.c allreduce.c model.c schedule.c data.c ops_cpu.c
BUILD ?= build

# ---- optional GPU support: detected, reported, and switchable with CUDA=0/1 ----
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(NVCC)),)
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
NVCCFLAGS ?= -O3 -std=c++17 -fmad=false $(NVCC_ARCH) --Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
ifeq ($(CUDA),1)
  GPU_OBJS := $(BUILD)/kernels.o
  NVCCFLAGS += -I$(dir $(CUBLAS_INC)) -I$(dir $(NCCL_INC))
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(CUBLAS_LIB) -Wl,-rpath,$(dir $(CUBLAS_LIB)) \
            $(NCCL_LIB) -Wl,-rpath,$(dir $(NCCL_LIB)) -lcudart -lstdc++
else
  GPU_OBJS := $(BUILD)/cuda_stub.o
endif
OBJS := $(SRCS:%.c=$(BUILD)/%.o) $(GPU_OBJS)

.PHONY: all deps features run test asan clean bench
all: micropp

# Installs what a fresh Debian 12 lacks (compiler, MPICH, cJSON, OpenBLAS), only when a probe
# shows it missing; uses sudo when not root. DEPS=0 skips it (packages unpacked elsewhere, as on a
# GPU machine without registries: see bench/gpu.sh).
DEPS ?= 1
deps:
	@[ "$(DEPS)" = 0 ] && exit 0; missing=""; \
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
	@echo "micropp build: cuBLAS: $(if $(HAVE_CUBLAS),found ($(CUBLAS_LIB)),not found)"
	@echo "micropp build: NCCL: $(if $(HAVE_NCCL),found ($(NCCL_LIB)),not found)"
	@echo "micropp build: GPU support: $(if $(filter 1,$(CUDA)),on,off (CPU only))"

micropp: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)
	@$(MAKE) --no-print-directory features

$(BUILD)/%.o: %.c | deps $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels.o: kernels.cu ops.h ops_math.h devcomm.h util.h | $(BUILD)
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
UNIT_BINS := $(patsubst tests/%.c,tests/bin/%,$(wildcard tests/unit_*.c))
# MPI test programs (tests/mpi_*.c): built the same way, run under mpiexec by the tests/t_*.sh scripts.
MPI_TEST_BINS := $(patsubst tests/%.c,tests/bin/%,$(wildcard tests/mpi_*.c))
tests/bin/%: tests/%.c tests/unit.h $(LIB_OBJS) | deps
	@mkdir -p tests/bin
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)

test: micropp $(UNIT_BINS) $(MPI_TEST_BINS) $(if $(filter 1,$(CUDA)),micropp-cpu)
	@bash tests/run.sh

# AddressSanitizer + UBSan build of the same sources, then the suite against it.
asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" micropp-asan
micropp-asan: $(OBJS) | deps
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDLIBS)

bench/sgemm: bench/sgemm.c $(LIB_OBJS) | deps
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)
bench/gpu_sgemm: bench/gpu_sgemm.c $(LIB_OBJS) | deps
	$(CC) $(CFLAGS) -I. -o $@ $< $(LIB_OBJS) $(LDLIBS)

bench: micropp bench/sgemm
	bash bench/foundation.sh
	bash bench/pipeline.sh

clean:
	rm -rf build build-asan build-cpu micropp micropp-asan micropp-cpu tests/bin bench/sgemm bench/gpu_sgemm

-include $(OBJS:.o=.d)
