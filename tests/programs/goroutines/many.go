// N parked goroutines beside a fixed CPU-bound job: what goroutine
// sampling costs (scripts/bench-goroutines).
//
// usage: many N SECONDS
// Parks N goroutines on a channel receive, then hashes 4 KiB blocks on
// GOMAXPROCS goroutines for SECONDS and prints `ops_per_s X`.
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	secs, _ := strconv.ParseFloat(os.Args[2], 64)
	ch := make(chan int)
	for i := 0; i < n; i++ {
		go func() { <-ch }()
	}
	var ops atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			buf := make([]byte, 4096)
			for !stop.Load() {
				sha256.Sum256(buf)
				ops.Add(1)
			}
			wg.Done()
		}()
	}
	t0 := time.Now()
	time.Sleep(time.Duration(secs * float64(time.Second)))
	stop.Store(true)
	wg.Wait()
	fmt.Printf("ops_per_s %.0f\n", float64(ops.Load())/time.Since(t0).Seconds())
	close(ch)
}
