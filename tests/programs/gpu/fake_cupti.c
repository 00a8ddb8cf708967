/* Fake libcupti: the CUPTI calls wallclock's injection library makes,
 * delivering records at CUPTI's real offsets (cupti_abi.h) through the
 * same protocol: callbacks at API enter/exit via cuptiSubscribe, activity
 * records in client buffers via cuptiActivityRegisterCallbacks and
 * cuptiActivityFlushAll. It hooks into the fake libcuda.
 * $FAKE_CUPTI_VERSION overrides the version it reports (default 28);
 * $FAKE_CUPTI_DROP=N drops the first N kernel records (counted). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti_abi.h"
#include "fake_cuda.h"

typedef void (*callback_fn)(void *userdata, int domain, uint32_t cbid, const void *cbdata);
typedef void (*buf_requested_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*buf_completed_fn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);
typedef uint64_t (*timestamp_fn)(void);

static callback_fn subscriber;
static void *subscriber_data;
static int domain_enabled[3];
static int kind_enabled[64];
static buf_requested_fn buf_requested;
static buf_completed_fn buf_completed;
static timestamp_fn timestamp_cb;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *buf;
static size_t buf_size, buf_used;
static size_t dropped, drop_left = (size_t)-1;

static uint64_t now(void) {
    if (timestamp_cb) return timestamp_cb();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel9);
    case KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case KIND_RUNTIME: case KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
    case KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
    }
    return 0;
}

/* Hands the current buffer back to the client; lock held. */
static void complete_locked(void) {
    if (!buf) return;
    uint8_t *b = buf;
    size_t size = buf_size, used = buf_used;
    buf = NULL;
    buf_used = 0;
    pthread_mutex_unlock(&lock);
    buf_completed(NULL, 0, b, size, used);
    pthread_mutex_lock(&lock);
}

/* Room for `n` bytes in the current buffer, or NULL (then counted as dropped). */
static void *reserve_locked(size_t n) {
    if (buf && buf_used + n > buf_size) complete_locked();
    if (!buf) {
        size_t max = 0;
        buf_requested(&buf, &buf_size, &max);
        buf_used = 0;
        if (!buf || buf_size < n) {
            buf = NULL;
            return NULL;
        }
    }
    void *p = buf + buf_used;
    memset(p, 0, n);
    buf_used += n;
    return p;
}

static void emit(const void *rec, size_t n) {
    pthread_mutex_lock(&lock);
    void *p = buf_completed ? reserve_locked(n) : NULL;
    if (p)
        memcpy(p, rec, n);
    else
        dropped++;
    pthread_mutex_unlock(&lock);
}

static void hook_callback(int domain, int cbid, const char *name, int site, uint32_t corr) {
    if (!subscriber || domain < 1 || domain > 2 || !domain_enabled[domain]) return;
    uint64_t corr_data = 0;
    CUpti_CallbackData d = {.callbackSite = (uint32_t)site, .functionName = name, .correlationId = corr,
                            .correlationData = &corr_data};
    subscriber(subscriber_data, domain, (uint32_t)cbid, &d);
}

static void hook_api_record(int domain, int cbid, uint32_t corr, uint64_t start, uint64_t end, uint32_t tid) {
    int kind = domain == DOMAIN_RUNTIME_API ? KIND_RUNTIME : KIND_DRIVER;
    if (!kind_enabled[kind]) return;
    CUpti_ActivityAPI r = {.kind = (uint32_t)kind, .cbid = (uint32_t)cbid, .start = start, .end = end,
                           .processId = (uint32_t)getpid(), .threadId = tid, .correlationId = corr};
    emit(&r, sizeof r);
}

static void hook_gpu(const struct fake_gpu_op *op) {
    if (!kind_enabled[op->kind]) return;
    switch (op->kind) {
    case KIND_CONCURRENT_KERNEL: {
        if (drop_left == (size_t)-1) {
            const char *d = getenv("FAKE_CUPTI_DROP");
            drop_left = d ? strtoul(d, NULL, 10) : 0;
        }
        if (drop_left > 0) {
            pthread_mutex_lock(&lock);
            drop_left--;
            dropped++;
            pthread_mutex_unlock(&lock);
            return;
        }
        CUpti_ActivityKernel9 r = {.kind = KIND_CONCURRENT_KERNEL, .start = op->start, .end = op->end,
                                   .deviceId = 0, .contextId = 1, .streamId = op->stream, .gridX = op->grid,
                                   .gridY = 1, .gridZ = 1, .blockX = op->block, .blockY = 1, .blockZ = 1,
                                   .correlationId = op->corr, .name = strdup(op->name), .graphId = op->graph_id};
        emit(&r, sizeof r);
        break;
    }
    case KIND_MEMCPY: {
        CUpti_ActivityMemcpy6 r = {.kind = KIND_MEMCPY, .copyKind = (uint8_t)op->sub, .bytes = op->bytes,
                                   .start = op->start, .end = op->end, .contextId = 1, .streamId = op->stream,
                                   .correlationId = op->corr};
        emit(&r, sizeof r);
        break;
    }
    case KIND_MEMSET: {
        CUpti_ActivityMemset4 r = {.kind = KIND_MEMSET, .bytes = op->bytes, .start = op->start, .end = op->end,
                                   .contextId = 1, .streamId = op->stream, .correlationId = op->corr};
        emit(&r, sizeof r);
        break;
    }
    case KIND_SYNCHRONIZATION: {
        CUpti_ActivitySynchronization2 r = {.kind = KIND_SYNCHRONIZATION, .type = op->sub, .start = op->start,
                                            .end = op->end, .correlationId = op->corr, .contextId = 1,
                                            .streamId = op->stream, .cudaEventId = 0};
        emit(&r, sizeof r);
        break;
    }
    }
}

static const struct fake_hooks hooks = {hook_callback, hook_api_record, hook_gpu, now};

static void attach(void) {
    void (*set)(const struct fake_hooks *) = (void (*)(const struct fake_hooks *))dlsym(RTLD_DEFAULT,
                                                                                         "fakecuda_set_hooks");
    if (set) set(&hooks);
}

CUptiResult cuptiGetVersion(uint32_t *v) {
    const char *e = getenv("FAKE_CUPTI_VERSION");
    *v = e ? (uint32_t)atoi(e) : 28;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult r, const char **s) {
    *s = r == 0 ? "CUPTI_SUCCESS" : "CUPTI_ERROR_FAKE";
    return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(void **handle, callback_fn cb, void *userdata) {
    subscriber = cb;
    subscriber_data = userdata;
    *handle = (void *)&subscriber;
    attach();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiUnsubscribe(void *handle) {
    (void)handle;
    subscriber = NULL;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableDomain(uint32_t enable, void *handle, int domain) {
    (void)handle;
    if (domain < 1 || domain > 2) return CUPTI_ERROR_INVALID_PARAMETER;
    domain_enabled[domain] = (int)enable;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(int kind) {
    if (kind <= 0 || kind >= 64) return CUPTI_ERROR_INVALID_PARAMETER;
    kind_enabled[kind] = 1;
    attach();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(int kind) {
    if (kind <= 0 || kind >= 64) return CUPTI_ERROR_INVALID_PARAMETER;
    kind_enabled[kind] = 0;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(buf_requested_fn req, buf_completed_fn done) {
    buf_requested = req;
    buf_completed = done;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterTimestampCallback(timestamp_fn f) {
    timestamp_cb = f;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t *t) {
    *t = now();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **rec) {
    uint8_t *p = *rec ? (uint8_t *)*rec + record_size((*rec)->kind) : buffer;
    if (p + sizeof(CUpti_Activity) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *rec = (CUpti_Activity *)p;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *n) {
    (void)ctx, (void)stream;
    pthread_mutex_lock(&lock);
    *n = dropped;
    dropped = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* Completes the current buffer, after an overhead record for the flush. */
CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    if (!buf_completed) return CUPTI_SUCCESS;
    pthread_mutex_lock(&lock);
    if (buf && kind_enabled[KIND_OVERHEAD]) {
        uint64_t t = now();
        CUpti_ActivityOverhead3 *o = reserve_locked(sizeof *o);
        if (o) *o = (CUpti_ActivityOverhead3){.kind = KIND_OVERHEAD, .overheadKind = OVERHEAD_CUPTI_BUFFER_FLUSH,
                                              .start = t, .end = t + 500};
    }
    complete_locked();
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiFinalize(void) { return CUPTI_SUCCESS; }
