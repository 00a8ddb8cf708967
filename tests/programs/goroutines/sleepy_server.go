// A net/http server whose handler waits where the test knows: a
// time.Sleep in main.nap, then a channel receive in main.fetch (a
// worker goroutine answers after a delay). The ground truth of
// tests/goroutines.rs's server test.
//
// usage: sleepy_server PORTFILE
// It listens on 127.0.0.1 (a free port, written to PORTFILE); GET /quit
// exits.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

//go:noinline
func nap() {
	time.Sleep(20 * time.Millisecond)
}

//go:noinline
func fetch() int {
	ch := make(chan int)
	go func() {
		time.Sleep(20 * time.Millisecond)
		ch <- 42
	}()
	return <-ch
}

func handler(w http.ResponseWriter, r *http.Request) {
	nap()
	fmt.Fprintf(w, "%d\n", fetch())
}

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := os.WriteFile(os.Args[1], []byte(fmt.Sprintf("%d\n", port)), 0o644); err != nil {
		panic(err)
	}
	http.HandleFunc("/", handler)
	http.HandleFunc("/quit", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "bye")
		go func() { time.Sleep(50 * time.Millisecond); os.Exit(0) }()
	})
	http.Serve(ln, nil)
}
