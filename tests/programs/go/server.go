// A net/http server that hashes with crypto/sha256 per request and
// measures its handler's own CPU time: the ground truth of tests/runtime_go.rs.
//
// usage: server PORTFILE TRUTHFILE
// It listens on 127.0.0.1 (a free port, written to PORTFILE). GET /hash
// hashes 256 KiB; GET /quit writes {"handler_ns", "process_ns",
// "requests"} to TRUTHFILE and exits. The handler runs locked to its OS
// thread, so that the thread's CPU clock around it is its own CPU time.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

var handlerNs, requests atomic.Int64
var buf = make([]byte, 256<<10)

// cpuNs reads a CPU clock (3: this thread's, 2: the process's).
func cpuNs(clock uintptr) int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func handler(w http.ResponseWriter, r *http.Request) {
	runtime.LockOSThread()
	t0 := cpuNs(3)
	sum := sha256.Sum256(buf)
	for i := 0; i < 3; i++ {
		sum = sha256.Sum256(append(buf[:len(buf)-32], sum[:]...))
	}
	w.Write([]byte(hex.EncodeToString(sum[:])))
	handlerNs.Add(cpuNs(3) - t0)
	runtime.UnlockOSThread()
	requests.Add(1)
}

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	os.WriteFile(os.Args[1], []byte(fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)), 0o644)
	http.HandleFunc("/hash", handler)
	http.HandleFunc("/quit", func(w http.ResponseWriter, r *http.Request) {
		truth := fmt.Sprintf(`{"handler_ns":%d,"process_ns":%d,"requests":%d}`, handlerNs.Load(), cpuNs(2), requests.Load())
		os.WriteFile(os.Args[2], []byte(truth+"\n"), 0o644)
		os.Exit(0)
	})
	http.Serve(ln, nil)
}
