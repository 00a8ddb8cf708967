/* A CUDA program in miniature, run against the fake libcudart/libcuda:
 * each kind of GPU work is issued from its own named CPU function, so the
 * test knows which function must own each kernel. Built -O2 without frame
 * pointers, so only .eh_frame unwinding finds these functions.
 *   gpu_app [ITERS]      prints a checksum, exits 3
 *   gpu_app bench N      times N launches, prints "launch_ns X" on stderr
 *   gpu_app loop N MS    N rounds of gemm + relu, MS ms apart (to be attached to)
 *   gpu_app idle N       N rounds of: a 20 ms kernel, waiting for it, then with the
 *                        GPU idle, load_batch sleeps 15 ms and collate computes
 *                        10 ms; prints its own timings within the GPU's idle time */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>

#include "fake_cuda.h"

#define NOINLINE __attribute__((noinline))

/* Host stubs, registered like nvcc's generated code does. */
NOINLINE void gemm_stub(void) { __asm__ volatile(""); }
NOINLINE void add_bias_stub(void) { __asm__ volatile("nop"); }
NOINLINE void softmax_stub(void) { __asm__ volatile("nop; nop"); }

__attribute__((constructor)) static void register_kernels(void) {
    __cudaRegisterFunction(NULL, (const char *)gemm_stub, "_Z4gemmPKfS0_Pfi", "_Z4gemmPKfS0_Pfi", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(NULL, (const char *)add_bias_stub, "_Z8add_biasPfPKfi", "_Z8add_biasPfPKfi", -1, 0, 0, 0,
                           0, 0);
    __cudaRegisterFunction(NULL, (const char *)softmax_stub, "_Z7softmaxPfi", "_Z7softmaxPfi", -1, 0, 0, 0, 0, 0);
}

static int sink;

NOINLINE int launch_gemm(int i) {
    dim3 g = {64 + (unsigned)(i % 4), 1, 1}, b = {128, 1, 1};
    void *args[1] = {0};
    int rc = cudaLaunchKernel((const void *)gemm_stub, g, b, args, 0, 0);
    sink += rc;
    return rc;
}

NOINLINE int launch_relu(CUfunction relu, int i) {
    int rc = cuLaunchKernel(relu, 32, 1, 1, 256 + (unsigned)i % 2, 1, 1, 0, 0, NULL, NULL);
    sink += rc;
    return rc;
}

NOINLINE int launch_scale(CUfunction scale) {
    CUlaunchConfig c = {.gridDimX = 8, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 64, .blockDimY = 1,
                        .blockDimZ = 1};
    int rc = cuLaunchKernelEx(&c, scale, NULL, NULL);
    sink += rc;
    return rc;
}

NOINLINE cudaGraphExec_t build_graph(void) {
    cudaGraph_t g;
    cudaGraphNode_t n1, n2;
    cudaGraphCreate(&g, 0);
    struct cudaKernelNodeParams p1 = {.func = (void *)add_bias_stub, .gridDim = {16, 1, 1}, .blockDim = {32, 1, 1}};
    struct cudaKernelNodeParams p2 = {.func = (void *)softmax_stub, .gridDim = {4, 1, 1}, .blockDim = {512, 1, 1}};
    cudaGraphAddKernelNode(&n1, g, NULL, 0, &p1);
    cudaGraphAddKernelNode(&n2, g, &n1, 1, &p2);
    cudaGraphExec_t e;
    cudaGraphInstantiate(&e, g, 0);
    return e;
}

NOINLINE int run_graph(cudaGraphExec_t e) {
    int rc = cudaGraphLaunch(e, 0);
    sink += rc;
    return rc;
}

NOINLINE int copy_in(float *dev, const float *host, size_t n) {
    int rc = cudaMemcpy(dev, host, n * sizeof *host, cudaMemcpyHostToDevice);
    sink += rc;
    return rc;
}

NOINLINE int copy_out(float *host, const float *dev, size_t n) {
    int rc = cudaMemcpy(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost);
    sink += rc;
    return rc;
}

NOINLINE int clear_buf(float *dev, size_t n) {
    int rc = cudaMemset(dev, 0, n * sizeof *dev);
    sink += rc;
    return rc;
}

NOINLINE int wait_gpu(void) {
    int rc = cudaDeviceSynchronize();
    sink += rc;
    return rc;
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Sleeps until CLOCK_MONOTONIC `t` ns, through signals (an attach
 * interrupts the sleep it stops the thread in). */
#define SLEEP_UNTIL(t)                                                                             \
    do {                                                                                           \
        struct timespec ts_ = {(time_t)((t) / 1e9), (long)((t) - (double)(time_t)((t) / 1e9) * 1e9)}; \
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts_, NULL) == EINTR) {              \
        }                                                                                          \
    } while (0)
/* A macro, not a function: each phase is then the innermost frame of its own sleep. */

NOINLINE void pause_between(int ms) { SLEEP_UNTIL(mono() + ms * 1e6); }

static int loop(int n, int ms) {
    CUmodule mod;
    CUfunction relu;
    cuModuleLoadData(&mod, "fake-cubin");
    cuModuleGetFunction(&relu, mod, "_Z4reluPfi");
    for (int i = 0; i < n; i++) {
        launch_gemm(i);
        launch_relu(relu, i);
        pause_between(ms);
    }
    printf("loop %d sink %d\n", n, sink);
    return 3;
}

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

NOINLINE double launch_big(unsigned grid) {
    dim3 g = {grid, 1, 1}, b = {0, 1, 1};
    void *args[1] = {0};
    double t = mono();
    sink += cudaLaunchKernel((const void *)gemm_stub, g, b, args, 0, 0);
    return t;
}
NOINLINE void wait_kernel(double until) { SLEEP_UNTIL(until); }
NOINLINE void load_batch(int ms) { SLEEP_UNTIL(mono() + ms * 1e6); }
static volatile unsigned long spin;
/* Reads the clock itself (vDSO), so that its time is its own frame's. */
NOINLINE void collate(int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double end = ts.tv_sec * 1e9 + ts.tv_nsec + ms * 1e6;
    do {
        spin++;
        clock_gettime(CLOCK_MONOTONIC, &ts);
    } while (ts.tv_sec * 1e9 + ts.tv_nsec < end);
}

/* The GPU is idle from a kernel's end (its launch + 1500 ns + its
 * length, as the fake runs it) to the next launch: the time of each
 * phase inside that is this program's own truth. */
static int idle(int n) {
    const unsigned grid = 20000; /* a 20 ms kernel */
    const double len = grid * 1000.0;
    double idle_ns = 0, sleep_ns = 0, cpu_ns = 0, collate_ns = 0, over_ns = 0, prev_end = 0;
    for (int i = 0; i < n; i++) {
        double t = launch_big(grid);
        if (i > 0) idle_ns += t - prev_end;
        prev_end = t + 1500 + len;
        wait_kernel(prev_end);
        if (i == n - 1) break; /* the GPU's last activity has ended */
        double a = mono();
        load_batch(15);
        double b = mono(), c0 = thread_cpu();
        collate(10);
        double c = mono();
        /* Only the part after the kernel's end is idle time: a late
         * wake-up of wait_kernel is its own. */
        sleep_ns += b - a;
        if (a > prev_end) over_ns += a - prev_end;
        collate_ns += c - b;
        cpu_ns += thread_cpu() - c0;
    }
    printf("idle_ns %.0f load_batch_ns %.0f collate_ns %.0f collate_cpu_ns %.0f wait_kernel_late_ns %.0f\n", idle_ns,
           sleep_ns, collate_ns, cpu_ns, over_ns);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 3 && strcmp(argv[1], "loop") == 0) return loop(atoi(argv[2]), atoi(argv[3]));
    if (argc > 2 && strcmp(argv[1], "idle") == 0) return idle(atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "bench") == 0) {
        int n = atoi(argv[2]);
        launch_gemm(0);
        double t0 = mono();
        for (int i = 0; i < n; i++) launch_gemm(i);
        double t1 = mono();
        fprintf(stderr, "launch_ns %.0f\n", (t1 - t0) / n);
        return 0;
    }
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    size_t n = 4096;
    float *host = malloc(n * sizeof *host), *dev;
    for (size_t i = 0; i < n; i++) host[i] = (float)i;
    cudaMalloc((void **)&dev, n * sizeof *dev);
    CUmodule mod;
    CUfunction relu, scale;
    cuModuleLoadData(&mod, "fake-cubin");
    cuModuleGetFunction(&relu, mod, "_Z4reluPfi");
    cuModuleGetFunction(&scale, mod, "scale_kernel");
    cudaGraphExec_t graph = build_graph();

    copy_in(dev, host, n);
    for (int i = 0; i < iters; i++) {
        launch_gemm(i);
        launch_relu(relu, i);
        if (i % 2 == 0) launch_scale(scale);
        if (i % 3 == 0) run_graph(graph);
    }
    clear_buf(dev, n / 2);
    wait_gpu();
    copy_out(host, dev, n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += host[i];
    printf("iterations %d checksum %.0f\n", iters, sum);
    cudaFree(dev);
    return 3;
}
