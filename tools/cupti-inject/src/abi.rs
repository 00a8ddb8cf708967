//! The part of CUPTI's ABI this library uses, written by hand (no SDK
//! needed to build): the leading fields of the records it reads and the
//! signatures of the calls it makes. Offsets are CUPTI's, taken from
//! NVIDIA's `cupti_activity.h` (CUDA 12.9, CUPTI API version 28) and the
//! deprecated versions in `cupti_activity_deprecated.h`: the fields read
//! here sit at the same offsets in Kernel4..Kernel9, Memcpy3..Memcpy6,
//! Memset2..Memset4, Synchronization/Synchronization2 and
//! Overhead/Overhead2/Overhead3, i.e. every CUPTI since CUDA 10 (API
//! version 12), except `graphId`, which Kernel4 (CUDA 10) does not have.
//! Records are walked with `cuptiActivityGetNextRecord`, so their full
//! sizes never matter here. [`READS`] lists every field read, per record
//! version; `tests/abi_headers.rs` compiles NVIDIA's own headers (the
//! PyPI wheels `scripts/setup --tests` installs under `target/cuda`) and
//! checks each offset and size against them. The fake libcupti of the
//! tests uses the same offsets (`tests/programs/gpu/cupti_abi.h`).

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};

pub type CuptiResult = i32;
pub const CUPTI_SUCCESS: CuptiResult = 0;
/// What CUPTI answers on a machine without a usable driver.
pub const CUPTI_ERROR_NOT_INITIALIZED: CuptiResult = 15;

pub const KIND_MEMCPY: u32 = 1;
pub const KIND_MEMSET: u32 = 2;
pub const KIND_DRIVER: u32 = 4;
pub const KIND_RUNTIME: u32 = 5;
pub const KIND_CONCURRENT_KERNEL: u32 = 10;
pub const KIND_OVERHEAD: u32 = 17;
pub const KIND_SYNCHRONIZATION: u32 = 38;

pub const DOMAIN_DRIVER_API: u32 = 1;
pub const DOMAIN_RUNTIME_API: u32 = 2;
pub const API_ENTER: u32 = 0;

pub const FLUSH_FORCED: u32 = 1;

/// Oldest CUPTI API version whose records have the layout below (CUDA 10).
pub const MIN_VERSION: u32 = 12;
/// Newest version checked: NVIDIA's headers are checked up to CUDA 12.9
/// update 1 (API version 28); CUDA 13.0's CUPTI (2025.3.1, API version
/// 130001, numbered anew) was run on an H200 by scripts/gpu-check:
/// kernels named and under their launch stacks, their time within 0.5%
/// of the program's own CUDA events. Later versions are used with the
/// same layout, with a note in the stream.
pub const MAX_KNOWN_VERSION: u32 = 130_001;

/// `CUpti_ActivityKernel4`..`9`, up to `name`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Kernel {
    pub kind: u32,
    pub cache_config: u8,
    pub shared_memory_config: u8,
    pub registers_per_thread: u16,
    pub pgc_requested: u32,
    pub pgc_executed: u32,
    pub start: u64,
    pub end: u64,
    pub completed: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub static_shared_memory: i32,
    pub dynamic_shared_memory: i32,
    pub local_memory_per_thread: u32,
    pub local_memory_total: u32,
    pub correlation_id: u32,
    pub grid_id: i64,
    pub name: *const c_char,
}

/// `CUpti_ActivityMemcpy3`..`6`, up to `correlationId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy {
    pub kind: u32,
    pub copy_kind: u8,
    pub src_kind: u8,
    pub dst_kind: u8,
    pub flags: u8,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
}

/// `CUpti_ActivityMemset2`..`4`, up to `correlationId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memset {
    pub kind: u32,
    pub value: u32,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
}

/// `CUpti_ActivityAPI` (runtime and driver kinds).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Api {
    pub kind: u32,
    pub cbid: u32,
    pub start: u64,
    pub end: u64,
    pub process_id: u32,
    pub thread_id: u32,
    pub correlation_id: u32,
    pub return_value: u32,
}

/// `CUpti_ActivitySynchronization`/`2`, up to `cudaEventId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Sync {
    pub kind: u32,
    pub sync_type: u32,
    pub start: u64,
    pub end: u64,
    pub correlation_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub cuda_event_id: u32,
}

/// `CUpti_ActivityOverhead`..`3`, up to `end` (objectId is a 12-byte union).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Overhead {
    pub kind: u32,
    pub overhead_kind: u32,
    pub object_kind: u32,
    pub object_id: [u32; 3],
    pub start: u64,
    pub end: u64,
}

/// `CUpti_CallbackData` (a plain, naturally aligned struct).
#[repr(C)]
pub struct CallbackData {
    pub callback_site: u32,
    pub function_name: *const c_char,
    pub function_params: *const c_void,
    pub function_return_value: *mut c_void,
    pub symbol_name: *const c_char,
    pub context: *mut c_void,
    pub context_uid: u32,
    pub correlation_data: *mut u64,
    pub correlation_id: u32,
}

macro_rules! check {
    ($t:ty, $f:ident, $o:expr) => {
        const _: () = assert!(offset_of!($t, $f) == $o);
    };
}
check!(Kernel, start, 16);
check!(Kernel, end, 24);
check!(Kernel, device_id, 40);
check!(Kernel, context_id, 44);
check!(Kernel, stream_id, 48);
check!(Kernel, grid, 52);
check!(Kernel, block, 64);
check!(Kernel, correlation_id, 92);
check!(Kernel, name, 104);
const _: () = assert!(size_of::<Kernel>() == 112);
check!(Memcpy, copy_kind, 4);
check!(Memcpy, bytes, 8);
check!(Memcpy, start, 16);
check!(Memcpy, end, 24);
check!(Memcpy, device_id, 32);
check!(Memcpy, stream_id, 40);
check!(Memcpy, correlation_id, 44);
check!(Memset, bytes, 8);
check!(Memset, start, 16);
check!(Memset, device_id, 32);
check!(Memset, stream_id, 40);
check!(Memset, correlation_id, 44);
check!(Api, cbid, 4);
check!(Api, start, 8);
check!(Api, end, 16);
check!(Api, process_id, 24);
check!(Api, thread_id, 28);
check!(Api, correlation_id, 32);
const _: () = assert!(size_of::<Api>() == 40);
check!(Sync, sync_type, 4);
check!(Sync, start, 8);
check!(Sync, end, 16);
check!(Sync, correlation_id, 24);
check!(Sync, stream_id, 32);
check!(Overhead, overhead_kind, 4);
check!(Overhead, object_kind, 8);
check!(Overhead, object_id, 12);
check!(Overhead, start, 24);
check!(Overhead, end, 32);
check!(CallbackData, function_name, 8);
check!(CallbackData, context_uid, 48);
check!(CallbackData, correlation_id, 64);
const _: () = assert!(size_of::<CallbackData>() == 72);

/// One field this library reads from a CUPTI struct: the C struct
/// versions it reads it from (every version it accepts that has the
/// field), the field's C name, and where it reads it.
#[derive(Debug, Clone, Copy)]
pub struct FieldRead {
    pub structs: &'static [&'static str],
    pub field: &'static str,
    pub offset: usize,
    pub size: usize,
}

/// Kernel record versions CUPTI API versions 12 (CUDA 10) and up deliver.
pub const KERNEL_STRUCTS: &[&str] = &[
    "CUpti_ActivityKernel4",
    "CUpti_ActivityKernel5",
    "CUpti_ActivityKernel6",
    "CUpti_ActivityKernel7",
    "CUpti_ActivityKernel8",
    "CUpti_ActivityKernel9",
];
/// The kernel versions that have `graphId` (Kernel5, CUDA 11.0, on):
/// Kernel4 is 144 bytes long, so offset 156 is past its end.
pub const GRAPH_ID_STRUCTS: &[&str] = &[
    "CUpti_ActivityKernel5",
    "CUpti_ActivityKernel6",
    "CUpti_ActivityKernel7",
    "CUpti_ActivityKernel8",
    "CUpti_ActivityKernel9",
];
pub const GRAPH_ID_OFFSET: usize = 156;
/// The CUPTI API version of CUDA 11.0, the first to deliver Kernel5.
pub const GRAPH_ID_MIN_VERSION: u32 = 13;
pub const MEMCPY_STRUCTS: &[&str] =
    &["CUpti_ActivityMemcpy3", "CUpti_ActivityMemcpy4", "CUpti_ActivityMemcpy5", "CUpti_ActivityMemcpy6"];
pub const MEMSET_STRUCTS: &[&str] = &["CUpti_ActivityMemset2", "CUpti_ActivityMemset3", "CUpti_ActivityMemset4"];
pub const API_STRUCTS: &[&str] = &["CUpti_ActivityAPI"];
pub const SYNC_STRUCTS: &[&str] = &["CUpti_ActivitySynchronization", "CUpti_ActivitySynchronization2"];
pub const OVERHEAD_STRUCTS: &[&str] = &["CUpti_ActivityOverhead", "CUpti_ActivityOverhead2", "CUpti_ActivityOverhead3"];
pub const CALLBACK_STRUCTS: &[&str] = &["CUpti_CallbackData"];

/// Each record kind's Rust prefix read whole (`read_unaligned`): its C
/// versions must all be at least this long.
pub const PREFIXES: &[(&[&str], usize)] = &[
    (KERNEL_STRUCTS, size_of::<Kernel>()),
    (MEMCPY_STRUCTS, size_of::<Memcpy>()),
    (MEMSET_STRUCTS, size_of::<Memset>()),
    (API_STRUCTS, size_of::<Api>()),
    (SYNC_STRUCTS, size_of::<Sync>()),
    (OVERHEAD_STRUCTS, size_of::<Overhead>()),
    (CALLBACK_STRUCTS, size_of::<CallbackData>()),
];

macro_rules! read {
    ($structs:expr, $t:ty, $f:ident: $ft:ty, $c:literal) => {
        FieldRead { structs: $structs, field: $c, offset: offset_of!($t, $f), size: size_of::<$ft>() }
    };
}

/// Every field the library uses, with the offsets its Rust structs give
/// them; checked against NVIDIA's headers by `tests/abi_headers.rs`.
pub const READS: &[FieldRead] = &[
    read!(KERNEL_STRUCTS, Kernel, kind: u32, "kind"),
    read!(KERNEL_STRUCTS, Kernel, start: u64, "start"),
    read!(KERNEL_STRUCTS, Kernel, end: u64, "end"),
    read!(KERNEL_STRUCTS, Kernel, device_id: u32, "deviceId"),
    read!(KERNEL_STRUCTS, Kernel, stream_id: u32, "streamId"),
    read!(KERNEL_STRUCTS, Kernel, correlation_id: u32, "correlationId"),
    read!(KERNEL_STRUCTS, Kernel, name: *const c_char, "name"),
    FieldRead { structs: GRAPH_ID_STRUCTS, field: "graphId", offset: GRAPH_ID_OFFSET, size: 4 },
    read!(MEMCPY_STRUCTS, Memcpy, kind: u32, "kind"),
    read!(MEMCPY_STRUCTS, Memcpy, copy_kind: u8, "copyKind"),
    read!(MEMCPY_STRUCTS, Memcpy, bytes: u64, "bytes"),
    read!(MEMCPY_STRUCTS, Memcpy, start: u64, "start"),
    read!(MEMCPY_STRUCTS, Memcpy, end: u64, "end"),
    read!(MEMCPY_STRUCTS, Memcpy, device_id: u32, "deviceId"),
    read!(MEMCPY_STRUCTS, Memcpy, stream_id: u32, "streamId"),
    read!(MEMCPY_STRUCTS, Memcpy, correlation_id: u32, "correlationId"),
    read!(MEMSET_STRUCTS, Memset, kind: u32, "kind"),
    read!(MEMSET_STRUCTS, Memset, bytes: u64, "bytes"),
    read!(MEMSET_STRUCTS, Memset, start: u64, "start"),
    read!(MEMSET_STRUCTS, Memset, end: u64, "end"),
    read!(MEMSET_STRUCTS, Memset, device_id: u32, "deviceId"),
    read!(MEMSET_STRUCTS, Memset, stream_id: u32, "streamId"),
    read!(MEMSET_STRUCTS, Memset, correlation_id: u32, "correlationId"),
    read!(API_STRUCTS, Api, kind: u32, "kind"),
    read!(API_STRUCTS, Api, cbid: u32, "cbid"),
    read!(API_STRUCTS, Api, start: u64, "start"),
    read!(API_STRUCTS, Api, end: u64, "end"),
    read!(API_STRUCTS, Api, process_id: u32, "processId"),
    read!(API_STRUCTS, Api, thread_id: u32, "threadId"),
    read!(API_STRUCTS, Api, correlation_id: u32, "correlationId"),
    read!(SYNC_STRUCTS, Sync, kind: u32, "kind"),
    read!(SYNC_STRUCTS, Sync, sync_type: u32, "type"),
    read!(SYNC_STRUCTS, Sync, start: u64, "start"),
    read!(SYNC_STRUCTS, Sync, end: u64, "end"),
    read!(SYNC_STRUCTS, Sync, correlation_id: u32, "correlationId"),
    read!(SYNC_STRUCTS, Sync, stream_id: u32, "streamId"),
    read!(OVERHEAD_STRUCTS, Overhead, kind: u32, "kind"),
    read!(OVERHEAD_STRUCTS, Overhead, overhead_kind: u32, "overheadKind"),
    read!(OVERHEAD_STRUCTS, Overhead, start: u64, "start"),
    read!(OVERHEAD_STRUCTS, Overhead, end: u64, "end"),
    read!(CALLBACK_STRUCTS, CallbackData, callback_site: u32, "callbackSite"),
    read!(CALLBACK_STRUCTS, CallbackData, function_name: *const c_char, "functionName"),
    read!(CALLBACK_STRUCTS, CallbackData, correlation_id: u32, "correlationId"),
];

pub type CallbackFn = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);
pub type BufRequestedFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
pub type BufCompletedFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
pub type TimestampFn = unsafe extern "C" fn() -> u64;

/// The CUPTI entry points, resolved with `dlsym` from the loaded library.
pub struct Cupti {
    pub get_version: unsafe extern "C" fn(*mut u32) -> CuptiResult,
    pub get_result_string: Option<unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult>,
    pub subscribe: unsafe extern "C" fn(*mut *mut c_void, CallbackFn, *mut c_void) -> CuptiResult,
    pub unsubscribe: Option<unsafe extern "C" fn(*mut c_void) -> CuptiResult>,
    pub activity_disable: Option<unsafe extern "C" fn(u32) -> CuptiResult>,
    pub enable_domain: unsafe extern "C" fn(u32, *mut c_void, u32) -> CuptiResult,
    pub activity_enable: unsafe extern "C" fn(u32) -> CuptiResult,
    pub register_callbacks: unsafe extern "C" fn(BufRequestedFn, BufCompletedFn) -> CuptiResult,
    pub register_timestamp: Option<unsafe extern "C" fn(TimestampFn) -> CuptiResult>,
    pub get_timestamp: Option<unsafe extern "C" fn(*mut u64) -> CuptiResult>,
    pub get_next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut u32) -> CuptiResult,
    pub get_num_dropped: unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> CuptiResult,
    pub flush_all: unsafe extern "C" fn(u32) -> CuptiResult,
}

impl Cupti {
    /// Resolves every call from `handle` (a `dlopen` handle); the name of
    /// the first required one missing otherwise.
    ///
    /// # Safety
    /// `handle` must be a live handle of a library with CUPTI's ABI.
    #[allow(clippy::missing_transmute_annotations)] // each target type is the field's
    pub unsafe fn load(handle: *mut c_void) -> Result<Cupti, String> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: `handle` is a live dlopen handle (load's contract)
                // and the name a NUL-terminated literal; dlsym only reads them.
                let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
                if p.is_null() {
                    None
                } else {
                    // SAFETY: the symbol has CUPTI's documented signature.
                    Some(unsafe { std::mem::transmute::<*mut c_void, _>(p) })
                }
            }};
        }
        macro_rules! req {
            ($name:literal) => {
                sym!($name).ok_or_else(|| format!("{} is missing", $name))?
            };
        }
        Ok(Cupti {
            get_version: req!("cuptiGetVersion"),
            get_result_string: sym!("cuptiGetResultString"),
            subscribe: req!("cuptiSubscribe"),
            unsubscribe: sym!("cuptiUnsubscribe"),
            activity_disable: sym!("cuptiActivityDisable"),
            enable_domain: req!("cuptiEnableDomain"),
            activity_enable: req!("cuptiActivityEnable"),
            register_callbacks: req!("cuptiActivityRegisterCallbacks"),
            register_timestamp: sym!("cuptiActivityRegisterTimestampCallback"),
            get_timestamp: sym!("cuptiGetTimestamp"),
            get_next_record: req!("cuptiActivityGetNextRecord"),
            get_num_dropped: req!("cuptiActivityGetNumDroppedRecords"),
            flush_all: req!("cuptiActivityFlushAll"),
        })
    }

    /// CUPTI's name for `r`.
    pub fn error(&self, r: CuptiResult) -> String {
        if let Some(f) = self.get_result_string {
            let mut s: *const c_char = std::ptr::null();
            // SAFETY: CUPTI writes a static string pointer.
            if unsafe { f(r, &mut s) } == CUPTI_SUCCESS && !s.is_null() {
                // SAFETY: a NUL-terminated static string.
                return unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy().into_owned();
            }
        }
        format!("CUPTI error {r}")
    }
}
