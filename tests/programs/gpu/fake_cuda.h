/* The fake CUDA runtime (libcudart.so) and driver (libcuda.so.1): the
 * calls of the real API that the test program uses, with the same
 * signatures, plus the fake's internal hooks to the fake libcupti.
 * GPU work is simulated on a virtual timeline: a kernel lasts
 * gridX * 1000 + blockX ns, a copy 1 ns per byte, a memset 1 ns per 2
 * bytes; each one starts 1500 ns after its launch call at the earliest.
 * Everything the fake "ran" is logged to $FAKECUDA_TRUTH, one line each:
 *   kernel CORR MANGLED_NAME NS T | memcpy CORR KIND NS T | memset CORR - NS T | sync CORR - NS
 * (T: CLOCK_MONOTONIC ns when it was issued). Without a client hooked
 * in, GPU times are on CLOCK_REALTIME, as CUPTI's are by default; a
 * libcupti may hook in at any time (an attach to a running program). */
#ifndef WALLCLOCK_FAKE_CUDA_H
#define WALLCLOCK_FAKE_CUDA_H
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int cudaError_t;
typedef struct fake_func *CUfunction;
typedef struct fake_module *CUmodule;
typedef struct fake_graph *cudaGraph_t, *CUgraph;
typedef struct fake_graph *cudaGraphExec_t, *CUgraphExec;
typedef struct fake_node *cudaGraphNode_t;
typedef void *cudaStream_t, *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned x, y, z; } dim3;

struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    unsigned sharedMemBytes;
    void **kernelParams;
    void **extra;
};

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

enum { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };

/* Driver API. */
CUresult cuInit(unsigned flags);
CUresult cuModuleLoadData(CUmodule *m, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, CUstream s, void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n);
CUresult cuCtxSynchronize(void);

/* Runtime API. */
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned flags);
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
                                   const struct cudaKernelNodeParams *params);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);

/* Internal: what libcudart and libcupti use of the fake driver. */
#define FAKE_GRAPH_MAX 16
struct fake_func { char name[256]; };
struct fake_graph {
    int n;
    struct { char name[256]; dim3 grid, block; } nodes[FAKE_GRAPH_MAX];
};
uint32_t fake_api_enter(int domain, int cbid, const char *name, uint64_t *t0);
void fake_api_exit(int domain, int cbid, const char *name, uint32_t corr, uint64_t t0);
void fake_gpu_kernel(const char *name, dim3 grid, dim3 block, uintptr_t stream, uint32_t graph_id);
void fake_gpu_memcpy(int kind, size_t bytes);
void fake_gpu_memset(size_t bytes);
void fake_gpu_sync(void);

/* Set by the fake libcupti when a client subscribes. */
struct fake_gpu_op {
    int kind; /* KIND_* of cupti_abi.h */
    uint32_t corr;
    const char *name;
    uint64_t start, end, bytes;
    uint32_t stream, graph_id, sub; /* sub: copy kind or sync type */
    int32_t grid, block;
};
struct fake_hooks {
    void (*callback)(int domain, int cbid, const char *name, int site, uint32_t corr);
    void (*api_record)(int domain, int cbid, uint32_t corr, uint64_t start, uint64_t end, uint32_t tid);
    void (*gpu)(const struct fake_gpu_op *op);
    uint64_t (*now)(void);
};
void fakecuda_set_hooks(const struct fake_hooks *h);
#endif
