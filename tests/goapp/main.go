// profilefs demo and test target: a small Go service with net/http/pprof.
//
// It keeps its CPU, heap, goroutine, block and mutex profiles busy with
// recognisable functions (main.burnCPU, main.retainHeap, ...) and serves the
// standard /debug/pprof/ endpoints. Under /fault/<mode>/debug/pprof/<name>
// it serves the same real profiles broken in one way, so that tests can see
// how profilefs handles a failing target:
//
//	status500  HTTP 500 with a Go-style error body
//	notfound   HTTP 404 "Unknown profile"
//	slow       waits 60 s before answering (the client gives up first)
//	delay<MS>  waits MS milliseconds, then serves the real profile
//	cut        HTTP 200, complete response, but only the first half of the gzip
//	reset      Content-Length of the whole profile, half sent, connection closed
//	garbage    HTTP 200 with random bytes
//	empty      HTTP 200 with an empty body
//	html       HTTP 200 with an HTML page
//	rawproto   HTTP 200 with the profile gunzipped (valid proto, not gzip)
//	swap       any profile name serves the goroutine profile (other sample types)
//	code<N>    HTTP status N with an empty body (no Content-Type, no Location)
//	echo       HTTP 404 quoting the request, as Express does ("Cannot GET /...?token=T"),
//	           and its Authorization, X-Api-Key headers
//
// With -token T every request must carry "Authorization: Bearer T".
//
// A known workload, for tests that check the numbers a merge serves:
//
//	-alloc-rate R     allocate R MiB per second in main.allocSteady (64 KiB
//	                  objects, a GC every 100 ms so the heap profile is current)
//	-live-heap H      keep H MiB live from start in main.holdLive
//	-goroutines G     park G goroutines in main.parkedKnown
//	-contend-rate N   N mutex contentions per second in main.contendKnown
//	                  (its waiters block in main.contendKnown.func1)
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	_ "net/http/pprof"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

var retained [][]byte

//go:noinline
func burnCPU() {
	buf := make([]byte, 4096)
	for {
		for i := 0; i < 200; i++ {
			h := sha256.Sum256(buf)
			buf[i%len(buf)] = h[0]
		}
		time.Sleep(time.Millisecond)
	}
}

//go:noinline
func retainHeap() {
	for i := 0; ; i++ {
		b := make([]byte, 64*1024)
		if len(retained) < 64 {
			retained = append(retained, b)
		} else {
			retained[i%64] = b
		}
		time.Sleep(20 * time.Millisecond)
	}
}

//go:noinline
func contendMutex() {
	var mu sync.Mutex
	for i := 0; i < 4; i++ {
		go func() {
			for {
				mu.Lock()
				time.Sleep(100 * time.Microsecond)
				mu.Unlock()
			}
		}()
	}
}

//go:noinline
func parkedGoroutine(ch chan struct{}) { <-ch }

var allocSink []byte

// allocSteady allocates mibps MiB per second, paced by the clock.
//
//go:noinline
func allocSteady(mibps float64) {
	const chunk = 64 << 10
	perSec := mibps * (1 << 20) / chunk
	start, n := time.Now(), 0
	for {
		for want := int(time.Since(start).Seconds() * perSec); n < want; n++ {
			allocSink = make([]byte, chunk)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var live [][]byte

//go:noinline
func holdLive(mib int) {
	live = make([][]byte, 0, mib*16)
	for i := 0; i < mib*16; i++ {
		live = append(live, make([]byte, 64<<10))
	}
}

//go:noinline
func parkedKnown(ch chan struct{}) { <-ch }

// contendKnown makes rate mutex contentions a second: it holds mu while a
// new goroutine waits for it (a block event there), then unlocks (a mutex
// event here).
//
//go:noinline
func contendKnown(rate int) {
	var mu sync.Mutex
	period := time.Second / time.Duration(rate)
	for next := time.Now(); ; {
		next = next.Add(period)
		mu.Lock()
		go func() {
			mu.Lock()
			mu.Unlock()
		}()
		time.Sleep(2 * time.Millisecond) // the waiter parks on mu
		mu.Unlock()
		time.Sleep(time.Until(next))
	}
}

// relay sends a recorded response on unchanged: headers, status, body.
func relay(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func serveFault(w http.ResponseWriter, r *http.Request) {
	// /fault/<mode>/debug/pprof/<rest>
	rest := strings.TrimPrefix(r.URL.Path, "/fault/")
	i := strings.Index(rest, "/")
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	mode, inner := rest[:i], rest[i:]
	real := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r2 := r.Clone(r.Context())
		r2.URL.Path = inner
		http.DefaultServeMux.ServeHTTP(rec, r2)
		return rec
	}
	switch {
	case mode == "status500":
		w.Header().Set("X-Go-Pprof", "1")
		http.Error(w, "Could not enable CPU profiling: cpu profiling already in use", 500)
	case mode == "notfound":
		w.Header().Set("X-Go-Pprof", "1")
		http.Error(w, "Unknown profile", 404)
	case mode == "slow":
		select {
		case <-time.After(60 * time.Second):
		case <-r.Context().Done():
			return
		}
		relay(w, real())
	case strings.HasPrefix(mode, "delay"):
		ms, _ := strconv.Atoi(strings.TrimPrefix(mode, "delay"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		relay(w, real())
	case mode == "cut":
		b := real().Body.Bytes()
		w.Write(b[:len(b)/2])
	case mode == "reset":
		b := real().Body.Bytes()
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(200)
		w.Write(b[:len(b)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
		}
	case mode == "echo":
		w.WriteHeader(404)
		fmt.Fprintf(w, "Cannot GET %s %s %s\n", r.URL.RequestURI(), r.Header.Get("Authorization"),
			r.Header.Get("X-Api-Key"))
	case strings.HasPrefix(mode, "code"):
		code, _ := strconv.Atoi(strings.TrimPrefix(mode, "code"))
		w.Header()["Content-Type"] = nil
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(code)
	case mode == "swap":
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/debug/pprof/goroutine"
		http.DefaultServeMux.ServeHTTP(w, r2)
	case mode == "garbage":
		b := make([]byte, 4096)
		rand.Read(b)
		w.Write(b)
	case mode == "empty":
		w.WriteHeader(200)
	case mode == "html":
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html><body>Service Unavailable</body></html>\n")
	case mode == "rawproto":
		zr, err := gzip.NewReader(bytes.NewReader(real().Body.Bytes()))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		io.Copy(w, zr)
	default:
		http.NotFound(w, r)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	portFile := flag.String("port-file", "", "write the port chosen here once listening")
	token := flag.String("token", "", "require Authorization: Bearer TOKEN")
	allocRate := flag.Float64("alloc-rate", 0, "allocate this many MiB/s in main.allocSteady")
	liveHeap := flag.Int("live-heap", 0, "keep this many MiB live in main.holdLive")
	goroutines := flag.Int("goroutines", 0, "park this many goroutines in main.parkedKnown")
	contendRate := flag.Int("contend-rate", 0, "mutex contentions per second in main.contendKnown")
	flag.Parse()

	runtime.MemProfileRate = 1
	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)
	go burnCPU()
	go retainHeap()
	if *liveHeap > 0 {
		holdLive(*liveHeap)
	}
	if *allocRate > 0 {
		go allocSteady(*allocRate)
		go func() { // the heap profile is as of the last GC
			for {
				time.Sleep(100 * time.Millisecond)
				runtime.GC()
			}
		}()
	}
	known := make(chan struct{})
	for i := 0; i < *goroutines; i++ {
		go parkedKnown(known)
	}
	if *contendRate > 0 {
		go contendKnown(*contendRate)
	}
	// Let the heap profile show retainHeap from the first request on: it
	// reports the heap as of the last completed GC.
	time.Sleep(50 * time.Millisecond)
	runtime.GC()
	contendMutex()
	park := make(chan struct{})
	for i := 0; i < 3; i++ {
		go parkedGoroutine(park)
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/pprof/", http.DefaultServeMux)
	mux.HandleFunc("/fault/", serveFault)
	var h http.Handler = mux
	if *token != "" {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+*token {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if *portFile != "" {
		tmp := *portFile + ".tmp"
		os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n", port)), 0644)
		os.Rename(tmp, *portFile)
	}
	log.Printf("goapp: serving pprof on http://%s/debug/pprof", ln.Addr())
	log.Fatal(http.Serve(ln, h))
}
