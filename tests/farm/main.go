// A farm of fake pprof targets for the scale bench: one process listening
// on N loopback ports, each serving /debug/pprof/<name> with profiles
// recorded from a real Go program (files <name>.pb.gz in -profiles), after
// -delay-ms (a remote host's latency); /debug/pprof/profile?seconds=S
// answers the recorded cpu profile after S seconds more, as Go's does.
// With -ports K < N the targets share K ports, target i at
// http://127.0.0.1:<port i mod K>/t<i>/debug/pprof (a file descriptor
// per port: 10000 targets fit a 20000 fd limit). The base URLs are
// written to -port-file, one per line.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	n := flag.Int("n", 100, "number of targets")
	nports := flag.Int("ports", 0, "ports they share (default: one each)")
	delay := flag.Int("delay-ms", 100, "latency of every answer")
	dir := flag.String("profiles", "", "directory of recorded <name>.pb.gz")
	portFile := flag.String("port-file", "", "write the ports here")
	flag.Parse()

	profiles := map[string][]byte{}
	for _, name := range []string{"heap", "allocs", "goroutine", "block", "mutex", "threadcreate", "cpu"} {
		b, err := os.ReadFile(filepath.Join(*dir, name+".pb.gz"))
		if err != nil {
			log.Fatal(err)
		}
		profiles[name] = b
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if strings.HasPrefix(path, "/t") { // /t<i>/debug/pprof/...
			if i := strings.Index(path[1:], "/"); i > 0 {
				path = path[i+1:]
			}
		}
		name := strings.TrimPrefix(path, "/debug/pprof/")
		wait := time.Duration(*delay) * time.Millisecond
		if name == "profile" {
			s, _ := strconv.Atoi(r.URL.Query().Get("seconds"))
			wait += time.Duration(s) * time.Second
			name = "cpu"
		}
		b, ok := profiles[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	if *nports <= 0 || *nports > *n {
		*nports = *n
	}
	var ports, bases []string
	for i := 0; i < *nports; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
		go http.Serve(l, h)
	}
	for i := 0; i < *n; i++ {
		if *nports == *n {
			bases = append(bases, "http://127.0.0.1:"+ports[i]+"/debug/pprof")
		} else {
			bases = append(bases, fmt.Sprintf("http://127.0.0.1:%s/t%d/debug/pprof", ports[i%*nports], i))
		}
	}
	tmp := *portFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(bases, "\n")+"\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	os.Rename(tmp, *portFile)
	fmt.Fprintf(os.Stderr, "farm: %d targets\n", *n)
	select {}
}
