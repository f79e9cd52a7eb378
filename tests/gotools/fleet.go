package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sp "triotypha.test/gotools/syncproto"
)

// churnMarker precedes the wall-clock nanoseconds that bench churn writes into a pod label.
var churnMarker = []byte(`"churn-ts":"`)

// churnStamp finds `"churn-ts":"<digits>"` in value (the first well-formed occurrence, as
// bench/typha_clients.py's regular expression does) and returns the digits as a number.
func churnStamp(value []byte) (int64, bool) {
	for {
		i := bytes.Index(value, churnMarker)
		if i < 0 {
			return 0, false
		}
		value = value[i+len(churnMarker):]
		n := 0
		for n < len(value) && value[n] >= '0' && value[n] <= '9' {
			n++
		}
		if n > 0 && n < len(value) && value[n] == '"' {
			if ts, err := strconv.ParseInt(string(value[:n]), 10, 64); err == nil {
				return ts, true
			}
		}
	}
}

// fleet is N concurrent Typha clients in one process, the benchmark's stand-in for N
// calico-nodes; its output is bench/typha_clients.py's.
type fleet struct {
	start   time.Time
	synced  sync.WaitGroup // one count per member until it is in sync (or has failed)
	members sync.WaitGroup // one count per member goroutine

	mu      sync.Mutex
	open    map[net.Conn]struct{}
	closing bool // stdin ended: connection errors from now on are our own doing
	slowest time.Duration
	errors  []string
	updates int64
	delays  []float64
	// firsts: seconds from the fleet's start to each member's first message (its
	// MsgServerHello), or -1 for a member that never got one: a calico-node whose first
	// read waits longer than its read timeout gives up and reconnects.
	firsts    []float64
	notSynced int // members that ended without reaching in sync

	stamped   atomic.Int64 // churn-stamped updates received in sync so far, for count lines
	inSyncNow atomic.Int64 // members in sync and still connected
}

// runFleet implements `gobtool fleet`: it prints {"event":"in_sync",...} once every
// connection is in sync, keeps receiving until stdin reaches EOF, then closes every
// connection and prints {"event":"done",...}.  Each line read from stdin meanwhile is
// answered with {"event":"count","stamped":N}: the churn-stamped updates received so far
// (the runner's accounting window).
func runFleet(args []string) int {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	addr := fs.String("addr", "", "server address host:port")
	n := fs.Int("n", 1, "number of concurrent connections")
	syncer := fs.String("syncer", "felix", "syncer type to request")
	legacy := fs.Bool("legacy", false, "announce no decoder restart / compression")
	hostname := fs.String("hostname", "gobtool-fleet", "hostname prefix (a -<index> is added)")
	readTimeout := fs.Duration("read-timeout", 30*time.Second, "per-read deadline (Felix's)")
	tlsOpts := addTLSFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	tlsConfig, err := tlsOpts.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gobtool fleet:", err)
		return 2
	}
	if *addr == "" || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: gobtool fleet -addr HOST:PORT -n N [-syncer S] [-legacy] [-ca F [-cert F -key F] [-server-name N]]")
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	f := &fleet{start: time.Now(), open: map[net.Conn]struct{}{}, errors: []string{},
		delays: []float64{}, firsts: make([]float64, *n)}
	f.synced.Add(*n)
	f.members.Add(*n)
	for i := 0; i < *n; i++ {
		hello := helloOptions{Syncer: *syncer, Hostname: fmt.Sprintf("%s-%d", *hostname, i),
			Legacy: *legacy, ConnID: 0x4242000000000000 + uint64(i) + 1}
		f.firsts[i] = -1
		go f.member(i, *addr, tlsConfig, hello, *readTimeout)
	}

	f.synced.Wait()
	f.mu.Lock()
	inSync := map[string]any{"event": "in_sync", "seconds": f.slowest.Seconds(),
		"errors": firstErrors(f.errors), "not_in_sync": f.notSynced,
		"first_waits": append([]float64(nil), f.firsts...)}
	f.mu.Unlock()
	if err := out.Encode(inSync); err != nil {
		return 1
	}

	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		if err := out.Encode(map[string]any{"event": "count", "stamped": f.stamped.Load()}); err != nil {
			return 1
		}
	}
	inSyncAtEnd := f.inSyncNow.Load()
	f.closeAll()
	f.members.Wait()
	done := map[string]any{"event": "done", "delays": f.delays, "updates": f.updates,
		"errors": firstErrors(f.errors), "in_sync_at_end": inSyncAtEnd}
	if err := out.Encode(done); err != nil {
		return 1
	}
	return 0
}

func firstErrors(errs []string) []string {
	if len(errs) > 5 {
		return errs[:5]
	}
	return errs
}

// member runs one connection.  It keeps no KV map (a fleet of thousands would hold
// thousands of copies of the cluster): it counts updates and, once in sync, notes the
// churn delay of each update that carries a churn stamp.
func (f *fleet) member(index int, addr string, tlsConfig *tls.Config, hello helloOptions,
	readTimeout time.Duration) {
	defer f.members.Done()
	inSync := false
	gotFirst := false
	markSynced := func() {
		inSync = true
		f.inSyncNow.Add(1)
		f.mu.Lock()
		if d := time.Since(f.start); d > f.slowest {
			f.slowest = d
		}
		f.mu.Unlock()
		f.synced.Done()
	}
	var updates int64
	delays := []float64{}

	conn, err := dial(addr, tlsConfig, 10*time.Second)
	if err == nil {
		if f.track(conn) {
			err = session(conn, hello, readTimeout, func(msg any) (bool, error) {
				if !gotFirst {
					gotFirst = true
					f.mu.Lock()
					f.firsts[index] = time.Since(f.start).Seconds()
					f.mu.Unlock()
				}
				switch m := msg.(type) {
				case sp.MsgKVs:
					now := time.Now().UnixNano()
					updates += int64(len(m.KVs))
					if inSync {
						n := len(delays)
						for _, u := range m.KVs {
							if ts, ok := churnStamp(u.Value); ok {
								delays = append(delays, float64(now-ts)/1e9)
							}
						}
						f.stamped.Add(int64(len(delays) - n))
					}
				case sp.MsgSyncStatus:
					if m.SyncStatus == statusInSync && !inSync {
						markSynced()
					}
				}
				return false, nil
			})
		}
		if inSync {
			f.inSyncNow.Add(-1)
		}
		f.untrack(conn)
	}

	f.mu.Lock()
	f.updates += updates
	f.delays = append(f.delays, delays...)
	if err != nil && !f.closing {
		f.errors = append(f.errors, fmt.Sprintf("%s: %v", hello.Hostname, err))
	}
	f.mu.Unlock()
	if !inSync {
		// A failed member must not hold up the in_sync line; its error is there.
		f.mu.Lock()
		f.notSynced++
		if d := time.Since(f.start); d > f.slowest {
			f.slowest = d
		}
		f.mu.Unlock()
		f.synced.Done()
	}
}

// track registers an open connection for closeAll; false if the fleet is already closing.
func (f *fleet) track(conn net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.open[conn] = struct{}{}
	return true
}

func (f *fleet) untrack(conn net.Conn) {
	f.mu.Lock()
	delete(f.open, conn)
	f.mu.Unlock()
	_ = conn.Close()
}

// closeAll ends every member: closing its connection fails its pending read.
func (f *fleet) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for conn := range f.open {
		_ = conn.Close()
	}
}
