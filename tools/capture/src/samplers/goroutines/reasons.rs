//! The text Go's traceback prints for a wait reason (`goroutine 7
//! [chan receive]:`), by the name of its `runtime.waitReason*` constant:
//! the texts are in an array the linker gives no symbol, the constants'
//! names and values are in the DWARF. A name not known here (a newer Go)
//! is shown as the constant's own name.

const TEXTS: &[(&str, &str)] = &[
    ("Zero", ""),
    ("GCAssistMarking", "GC assist marking"),
    ("IOWait", "IO wait"),
    ("ChanReceiveNilChan", "chan receive (nil chan)"),
    ("ChanSendNilChan", "chan send (nil chan)"),
    ("DumpingHeap", "dumping heap"),
    ("GarbageCollection", "garbage collection"),
    ("GarbageCollectionScan", "garbage collection scan"),
    ("PanicWait", "panicwait"),
    ("Select", "select"),
    ("SelectNoCases", "select (no cases)"),
    ("GCAssistWait", "GC assist wait"),
    ("GCSweepWait", "GC sweep wait"),
    ("GCScavengeWait", "GC scavenge wait"),
    ("ChanReceive", "chan receive"),
    ("ChanSend", "chan send"),
    ("FinalizerWait", "finalizer wait"),
    ("ForceGCIdle", "force gc (idle)"),
    ("Semacquire", "semacquire"),
    ("Sleep", "sleep"),
    ("SyncCondWait", "sync.Cond.Wait"),
    ("SyncMutexLock", "sync.Mutex.Lock"),
    ("SyncRWMutexRLock", "sync.RWMutex.RLock"),
    ("SyncRWMutexLock", "sync.RWMutex.Lock"),
    ("TimerGoroutineIdle", "timer goroutine (idle)"),
    ("TraceReaderBlocked", "trace reader (blocked)"),
    ("WaitForGCCycle", "wait for GC cycle"),
    ("GCWorkerIdle", "GC worker (idle)"),
    ("GCWorkerActive", "GC worker (active)"),
    ("Preempted", "preempted"),
    ("DebugCall", "debug call"),
    ("GCMarkTermination", "GC mark termination"),
    ("StoppingTheWorld", "stopping the world"),
    ("FlushProcCaches", "flushing proc caches"),
    ("TraceGoroutineStatus", "trace goroutine status"),
    ("TraceProcStatus", "trace proc status"),
    ("PageTraceFlush", "page trace flush"),
    ("CoroutineYield", "coroutine"),
];

/// The traceback's text for the constant `runtime.waitReason{suffix}`.
pub fn text(suffix: &str) -> String {
    TEXTS.iter().find(|t| t.0 == suffix).map_or(suffix, |t| t.1).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_and_unknown_reasons() {
        assert_eq!(super::text("ChanReceive"), "chan receive");
        assert_eq!(super::text("SomethingNew"), "SomethingNew");
    }
}
