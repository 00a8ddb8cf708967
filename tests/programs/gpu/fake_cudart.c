/* Fake CUDA runtime (libcudart.so): each call is a runtime-API call that
 * nests the matching driver call, as the real cudart does. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "cupti_abi.h"
#include "fake_cuda.h"

#define MAX_FUNCS 64
static struct { const void *host; char name[256]; } funcs[MAX_FUNCS];
static int nfuncs;

static const char *func_name(const void *host) {
    for (int i = 0; i < nfuncs; i++)
        if (funcs[i].host == host) return funcs[i].name;
    return "unregistered";
}

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize) {
    (void)fatCubinHandle, (void)deviceName, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim,
        (void)wSize;
    if (nfuncs == MAX_FUNCS) return;
    funcs[nfuncs].host = hostFun;
    snprintf(funcs[nfuncs].name, sizeof funcs[nfuncs].name, "%s", deviceFun);
    nfuncs++;
}

#define ENTER(cbid, name) uint64_t t0_; uint32_t c_ = fake_api_enter(DOMAIN_RUNTIME_API, cbid, name, &t0_)
#define EXIT(cbid, name) fake_api_exit(DOMAIN_RUNTIME_API, cbid, name, c_, t0_)

cudaError_t cudaMalloc(void **p, size_t n) {
    ENTER(20, "cudaMalloc_v3020");
    *p = calloc(1, n);
    EXIT(20, "cudaMalloc_v3020");
    return *p ? 0 : 2;
}

cudaError_t cudaFree(void *p) {
    ENTER(22, "cudaFree_v3020");
    free(p);
    EXIT(22, "cudaFree_v3020");
    return 0;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    ENTER(31, "cudaMemcpy_v3020");
    if (kind == cudaMemcpyHostToDevice)
        cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)dst, src, n);
    else
        cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)src, n);
    EXIT(31, "cudaMemcpy_v3020");
    return 0;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
    ENTER(49, "cudaMemset_v3020");
    cuMemsetD8_v2((CUdeviceptr)(uintptr_t)p, (unsigned char)v, n);
    EXIT(49, "cudaMemset_v3020");
    return 0;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
    ENTER(211, "cudaLaunchKernel_v7000");
    struct fake_func f;
    snprintf(f.name, sizeof f.name, "%s", func_name(func));
    cuLaunchKernel(&f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, s, args, NULL);
    EXIT(211, "cudaLaunchKernel_v7000");
    return 0;
}

cudaError_t cudaDeviceSynchronize(void) {
    ENTER(165, "cudaDeviceSynchronize_v3020");
    cuCtxSynchronize();
    EXIT(165, "cudaDeviceSynchronize_v3020");
    return 0;
}

cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned flags) {
    (void)flags;
    ENTER(286, "cudaGraphCreate_v10000");
    *g = calloc(1, sizeof(struct fake_graph));
    EXIT(286, "cudaGraphCreate_v10000");
    return 0;
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
                                   const struct cudaKernelNodeParams *p) {
    (void)deps, (void)ndeps;
    ENTER(289, "cudaGraphAddKernelNode_v10000");
    if (g->n < FAKE_GRAPH_MAX) {
        snprintf(g->nodes[g->n].name, sizeof g->nodes[g->n].name, "%s", func_name(p->func));
        g->nodes[g->n].grid = p->gridDim;
        g->nodes[g->n].block = p->blockDim;
        *node = (cudaGraphNode_t)(uintptr_t)(g->n + 1);
        g->n++;
    }
    EXIT(289, "cudaGraphAddKernelNode_v10000");
    return 0;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    (void)flags;
    ENTER(443, "cudaGraphInstantiate_v12000");
    *e = malloc(sizeof **e);
    memcpy(*e, g, sizeof **e);
    EXIT(443, "cudaGraphInstantiate_v12000");
    return 0;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    ENTER(311, "cudaGraphLaunch_v10000");
    cuGraphLaunch(e, s);
    EXIT(311, "cudaGraphLaunch_v10000");
    return 0;
}
