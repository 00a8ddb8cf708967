/* The few CUPTI types the fake libcupti produces, written by hand at
 * CUPTI's real offsets (checked against NVIDIA's cupti_activity.h of
 * CUDA 12.9, CUPTI API version 28). The records are the newest versions
 * (Kernel9, Memcpy6, Memset4, API, Synchronization2, Overhead3), whose
 * leading fields sit at the same offsets in every version since CUDA 10.
 * tools/cupti-inject/src/abi.rs asserts the same offsets on the Rust side. */
#ifndef WALLCLOCK_CUPTI_ABI_H
#define WALLCLOCK_CUPTI_ABI_H
#include <stddef.h>
#include <stdint.h>

typedef int CUptiResult;
enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_INITIALIZED = 15,
};
enum {
    KIND_MEMCPY = 1,
    KIND_MEMSET = 2,
    KIND_DRIVER = 4,
    KIND_RUNTIME = 5,
    KIND_CONCURRENT_KERNEL = 10,
    KIND_OVERHEAD = 17,
    KIND_SYNCHRONIZATION = 38,
};
enum { DOMAIN_DRIVER_API = 1, DOMAIN_RUNTIME_API = 2 };
enum { API_ENTER = 0, API_EXIT = 1 };
enum { SYNC_EVENT = 1, SYNC_STREAM_WAIT_EVENT = 2, SYNC_STREAM = 3, SYNC_CONTEXT = 4 };
enum { OVERHEAD_CUPTI_BUFFER_FLUSH = 1 << 16 };

#define PACKED __attribute__((packed, aligned(8)))

typedef struct PACKED { uint32_t kind; } CUpti_Activity;

typedef struct PACKED {
    uint32_t kind;
    uint8_t cacheConfig, sharedMemoryConfig;
    uint16_t registersPerThread;
    uint32_t partitionedGlobalCacheRequested, partitionedGlobalCacheExecuted;
    uint64_t start, end, completed;
    uint32_t deviceId, contextId, streamId;
    int32_t gridX, gridY, gridZ, blockX, blockY, blockZ;
    int32_t staticSharedMemory, dynamicSharedMemory;
    uint32_t localMemoryPerThread, localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
    uint8_t pad0_[156 - 112];
    uint32_t graphId;
    uint8_t pad1_[208 - 160];
} CUpti_ActivityKernel9;

typedef struct PACKED {
    uint32_t kind;
    uint8_t copyKind, srcKind, dstKind, flags;
    uint64_t bytes, start, end;
    uint32_t deviceId, contextId, streamId, correlationId;
    uint8_t pad_[96 - 48];
} CUpti_ActivityMemcpy6;

typedef struct PACKED {
    uint32_t kind, value;
    uint64_t bytes, start, end;
    uint32_t deviceId, contextId, streamId, correlationId;
    uint8_t pad_[88 - 48];
} CUpti_ActivityMemset4;

typedef struct PACKED {
    uint32_t kind, cbid;
    uint64_t start, end;
    uint32_t processId, threadId, correlationId, returnValue;
} CUpti_ActivityAPI;

typedef struct PACKED {
    uint32_t kind, type;
    uint64_t start, end;
    uint32_t correlationId, contextId, streamId, cudaEventId;
    uint8_t pad_[56 - 40];
} CUpti_ActivitySynchronization2;

typedef struct PACKED {
    uint32_t kind, overheadKind, objectKind;
    uint8_t objectId[12];
    uint64_t start, end;
    uint32_t correlationId, reserved0;
    void *overheadData;
} CUpti_ActivityOverhead3;

/* Not packed: CUPTI declares it as a plain struct. */
typedef struct {
    uint32_t callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CUpti_CallbackData;

#define CHECK_OFF(T, f, o) _Static_assert(offsetof(T, f) == o, #T "." #f)
#define CHECK_SIZE(T, s) _Static_assert(sizeof(T) == s, "sizeof " #T)
CHECK_SIZE(CUpti_ActivityKernel9, 208);
CHECK_OFF(CUpti_ActivityKernel9, start, 16);
CHECK_OFF(CUpti_ActivityKernel9, end, 24);
CHECK_OFF(CUpti_ActivityKernel9, deviceId, 40);
CHECK_OFF(CUpti_ActivityKernel9, streamId, 48);
CHECK_OFF(CUpti_ActivityKernel9, gridX, 52);
CHECK_OFF(CUpti_ActivityKernel9, blockX, 64);
CHECK_OFF(CUpti_ActivityKernel9, correlationId, 92);
CHECK_OFF(CUpti_ActivityKernel9, name, 104);
CHECK_OFF(CUpti_ActivityKernel9, graphId, 156);
CHECK_SIZE(CUpti_ActivityMemcpy6, 96);
CHECK_OFF(CUpti_ActivityMemcpy6, copyKind, 4);
CHECK_OFF(CUpti_ActivityMemcpy6, bytes, 8);
CHECK_OFF(CUpti_ActivityMemcpy6, start, 16);
CHECK_OFF(CUpti_ActivityMemcpy6, deviceId, 32);
CHECK_OFF(CUpti_ActivityMemcpy6, streamId, 40);
CHECK_OFF(CUpti_ActivityMemcpy6, correlationId, 44);
CHECK_SIZE(CUpti_ActivityMemset4, 88);
CHECK_OFF(CUpti_ActivityMemset4, bytes, 8);
CHECK_OFF(CUpti_ActivityMemset4, start, 16);
CHECK_OFF(CUpti_ActivityMemset4, correlationId, 44);
CHECK_SIZE(CUpti_ActivityAPI, 40);
CHECK_OFF(CUpti_ActivityAPI, cbid, 4);
CHECK_OFF(CUpti_ActivityAPI, start, 8);
CHECK_OFF(CUpti_ActivityAPI, processId, 24);
CHECK_OFF(CUpti_ActivityAPI, threadId, 28);
CHECK_OFF(CUpti_ActivityAPI, correlationId, 32);
CHECK_SIZE(CUpti_ActivitySynchronization2, 56);
CHECK_OFF(CUpti_ActivitySynchronization2, type, 4);
CHECK_OFF(CUpti_ActivitySynchronization2, start, 8);
CHECK_OFF(CUpti_ActivitySynchronization2, correlationId, 24);
CHECK_OFF(CUpti_ActivitySynchronization2, streamId, 32);
CHECK_SIZE(CUpti_ActivityOverhead3, 56);
CHECK_OFF(CUpti_ActivityOverhead3, overheadKind, 4);
CHECK_OFF(CUpti_ActivityOverhead3, start, 24);
CHECK_OFF(CUpti_ActivityOverhead3, end, 32);
CHECK_OFF(CUpti_ActivityOverhead3, correlationId, 40);
CHECK_SIZE(CUpti_CallbackData, 72);
CHECK_OFF(CUpti_CallbackData, functionName, 8);
CHECK_OFF(CUpti_CallbackData, correlationId, 64);
#endif
