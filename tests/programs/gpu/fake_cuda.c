/* Fake CUDA driver (libcuda.so.1). Like the real one, its first call
 * loads $CUDA_INJECTION64_PATH and calls its InitializeInjection; a fake
 * libcupti then hooks in through fakecuda_set_hooks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "cupti_abi.h"
#include "fake_cuda.h"

static const struct fake_hooks *hooks;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_uint next_corr;
static __thread uint32_t depth, outer_corr;
static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t gpu_free_at;
static FILE *truth;

void fakecuda_set_hooks(const struct fake_hooks *h) { hooks = h; }

static void init(void) {
    const char *t = getenv("FAKECUDA_TRUTH");
    if (t && *t) truth = fopen(t, "a");
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (!inj || !*inj) return;
    void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "fake libcuda: cannot load injection %s: %s\n", inj, dlerror());
        return;
    }
    int (*fn)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (fn) fn();
}

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* The client's clock (CUPTI's: CLOCK_REALTIME unless a timestamp callback is set). */
static uint64_t now(void) {
    if (hooks) return hooks->now();
    return clock_ns(CLOCK_REALTIME);
}

/* The virtual GPU keeps its timeline on CLOCK_MONOTONIC, so that a client
 * hooking in later (with another clock) finds it consistent; times are
 * shifted to the client's clock when reported. */
static uint64_t to_client(uint64_t mono_t) { return mono_t + (now() - clock_ns(CLOCK_MONOTONIC)); }

uint32_t fake_api_enter(int domain, int cbid, const char *name, uint64_t *t0) {
    pthread_once(&init_once, init);
    uint32_t corr = atomic_fetch_add(&next_corr, 1) + 1;
    if (depth++ == 0) outer_corr = corr;
    *t0 = now();
    if (hooks) hooks->callback(domain, cbid, name, API_ENTER, corr);
    return corr;
}

void fake_api_exit(int domain, int cbid, const char *name, uint32_t corr, uint64_t t0) {
    if (hooks) {
        hooks->callback(domain, cbid, name, API_EXIT, corr);
        hooks->api_record(domain, cbid, corr, t0, now(), (uint32_t)syscall(SYS_gettid));
    }
    depth--;
}

/* Schedules `dur` ns of work on the one virtual GPU and reports it. */
static void gpu_op(struct fake_gpu_op *op, uint64_t dur, const char *truth_fmt_name) {
    pthread_mutex_lock(&gpu_lock);
    uint64_t issued = clock_ns(CLOCK_MONOTONIC);
    uint64_t t = issued + 1500;
    uint64_t start = t > gpu_free_at ? t : gpu_free_at;
    gpu_free_at = start + dur;
    op->start = to_client(start);
    op->end = op->start + dur;
    op->corr = outer_corr; /* like CUPTI: the launch call's correlation id */
    if (truth) {
        fprintf(truth, "%s %u %s %llu %llu\n", truth_fmt_name, op->corr, op->name ? op->name : "-",
                (unsigned long long)dur, (unsigned long long)issued);
        fflush(truth);
    }
    pthread_mutex_unlock(&gpu_lock);
    if (hooks) hooks->gpu(op);
}

void fake_gpu_kernel(const char *name, dim3 grid, dim3 block, uintptr_t stream, uint32_t graph_id) {
    struct fake_gpu_op op = {.kind = KIND_CONCURRENT_KERNEL, .name = name, .stream = (uint32_t)stream + 7,
                             .graph_id = graph_id, .grid = (int32_t)grid.x, .block = (int32_t)block.x};
    gpu_op(&op, (uint64_t)grid.x * 1000 + block.x, "kernel");
}

void fake_gpu_memcpy(int kind, size_t bytes) {
    struct fake_gpu_op op = {.kind = KIND_MEMCPY, .name = kind == 1 ? "HtoD" : "DtoH", .bytes = bytes,
                             .stream = 7, .sub = (uint32_t)kind};
    gpu_op(&op, bytes, "memcpy");
}

void fake_gpu_memset(size_t bytes) {
    struct fake_gpu_op op = {.kind = KIND_MEMSET, .bytes = bytes, .stream = 7};
    gpu_op(&op, bytes / 2, "memset");
}

/* The CPU waits until the virtual GPU is idle. */
void fake_gpu_sync(void) {
    pthread_mutex_lock(&gpu_lock);
    struct fake_gpu_op op = {.kind = KIND_SYNCHRONIZATION, .sub = SYNC_CONTEXT, .stream = 0, .corr = outer_corr};
    uint64_t t = clock_ns(CLOCK_MONOTONIC);
    uint64_t end = gpu_free_at > t ? gpu_free_at : t;
    op.start = to_client(t);
    op.end = op.start + (end - t);
    if (truth) {
        fprintf(truth, "sync %u - %llu\n", op.corr, (unsigned long long)(op.end - op.start));
        fflush(truth);
    }
    pthread_mutex_unlock(&gpu_lock);
    if (hooks) hooks->gpu(&op);
}

#define ENTER(cbid, name) uint64_t t0_; uint32_t c_ = fake_api_enter(DOMAIN_DRIVER_API, cbid, name, &t0_)
#define EXIT(cbid, name) fake_api_exit(DOMAIN_DRIVER_API, cbid, name, c_, t0_)

CUresult cuInit(unsigned flags) {
    (void)flags;
    ENTER(1, "cuInit");
    EXIT(1, "cuInit");
    return 0;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    ENTER(19, "cuModuleLoadData");
    *m = (CUmodule)image;
    EXIT(19, "cuModuleLoadData");
    return 0;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    (void)m;
    ENTER(23, "cuModuleGetFunction");
    *f = calloc(1, sizeof(struct fake_func));
    snprintf((*f)->name, sizeof (*f)->name, "%s", name);
    EXIT(23, "cuModuleGetFunction");
    return 0;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    (void)shmem, (void)params, (void)extra;
    ENTER(307, "cuLaunchKernel");
    fake_gpu_kernel(f->name, (dim3){gx, gy, gz}, (dim3){bx, by, bz}, (uintptr_t)s, 0);
    EXIT(307, "cuLaunchKernel");
    return 0;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    (void)params, (void)extra;
    ENTER(652, "cuLaunchKernelEx");
    fake_gpu_kernel(f->name, (dim3){c->gridDimX, c->gridDimY, c->gridDimZ},
                    (dim3){c->blockDimX, c->blockDimY, c->blockDimZ}, (uintptr_t)c->hStream, 0);
    EXIT(652, "cuLaunchKernelEx");
    return 0;
}

CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    ENTER(514, "cuGraphLaunch");
    for (int i = 0; i < g->n; i++)
        fake_gpu_kernel(g->nodes[i].name, g->nodes[i].grid, g->nodes[i].block, (uintptr_t)s, 1);
    EXIT(514, "cuGraphLaunch");
    return 0;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    ENTER(276, "cuMemcpyHtoD_v2");
    memcpy((void *)(uintptr_t)dst, src, n);
    fake_gpu_memcpy(1, n);
    EXIT(276, "cuMemcpyHtoD_v2");
    return 0;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    ENTER(278, "cuMemcpyDtoH_v2");
    memcpy(dst, (const void *)(uintptr_t)src, n);
    fake_gpu_memcpy(2, n);
    EXIT(278, "cuMemcpyDtoH_v2");
    return 0;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    ENTER(249, "cuMemsetD8_v2");
    memset((void *)(uintptr_t)dst, v, n);
    fake_gpu_memset(n);
    EXIT(249, "cuMemsetD8_v2");
    return 0;
}

CUresult cuCtxSynchronize(void) {
    ENTER(17, "cuCtxSynchronize");
    fake_gpu_sync();
    EXIT(17, "cuCtxSynchronize");
    return 0;
}
