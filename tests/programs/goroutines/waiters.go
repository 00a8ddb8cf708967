// Goroutines that wait where the test knows: the ground truth of
// tests/goroutines.rs.
//
// usage: waiters READYFILE SECONDS
// 100 goroutines block in main.waiter on a channel receive for SECONDS,
// 10 loop on time.Sleep in main.napper, 3 hash in main.burn (run with
// GOMAXPROCS=2: they share two Ps, so each is running or runnable). When
// all are started it writes READYFILE; after SECONDS it closes the channel
// and exits.
package main

import (
	"crypto/sha256"
	"os"
	"strconv"
	"sync"
	"time"
)

var sink [32]byte

//go:noinline
func waiter(ch chan int, wg *sync.WaitGroup) {
	<-ch
	wg.Done()
}

//go:noinline
func napper(stop *int32, wg *sync.WaitGroup) {
	// Long sleeps: woken, a napper waits for one of the two Ps the
	// burners hold (runnable, not asleep) for up to a time slice.
	for !stopped(stop) {
		time.Sleep(500 * time.Millisecond)
	}
	wg.Done()
}

var mu sync.Mutex

func stopped(stop *int32) bool {
	mu.Lock()
	defer mu.Unlock()
	return *stop != 0
}

//go:noinline
func burn(stop *int32) {
	buf := make([]byte, 64<<10)
	for !stopped(stop) {
		sink = sha256.Sum256(buf)
	}
}

func main() {
	secs, err := strconv.ParseFloat(os.Args[2], 64)
	if err != nil {
		panic(err)
	}
	ch := make(chan int)
	var stop int32
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go waiter(ch, &wg)
	}
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go napper(&stop, &wg)
	}
	for i := 0; i < 3; i++ {
		go burn(&stop)
	}
	if err := os.WriteFile(os.Args[1], []byte("ready\n"), 0o644); err != nil {
		panic(err)
	}
	time.Sleep(time.Duration(secs * float64(time.Second)))
	close(ch)
	mu.Lock()
	stop = 1
	mu.Unlock()
	wg.Wait()
}
