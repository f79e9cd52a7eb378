package main

import (
	"bufio"
	"encoding/base64"
	"encoding/gob"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/golang/snappy"
	sp "triotypha.test/gotools/syncproto"
)

// The server subcommand stands in for Go Typha in tests of clients that follow Typha (a
// trio-typha relay tier).  It speaks the server side of Typha's protocol, in the order a
// Typha sync server sends things: MsgServerHello after the client's hello; for a client
// that supports decoder restarts and snappy, MsgDecoderRestart then (after the client's
// MsgACK) a snappy stream; the snapshot as sorted MsgKVs batches of New updates; the
// sync status, if it is not the zero WaitForDatastore; then each change as it is made and
// a MsgPing every -ping interval (the client's MsgPongs are read and dropped).
//
// The test drives it with JSON lines on stdin and reads JSON lines on stdout:
//
//	{"op":"put","syncer":S,"key":K,"value":BASE64,"revision":R}   create or update
//	{"op":"delete","syncer":S,"key":K,"revision":R}
//	{"op":"status","syncer":S,"status":N}
//	{"op":"digest","syncer":S}     -> {"event":"digest","syncer":S,"kvs":N,"digest":D}
//	{"op":"silence"}   stop writing to every open connection (they stay open)
//	{"op":"drop"}      close every open connection
//
// It prints {"event":"listening","port":P} first, and {"event":"ok","op":OP} after each
// other command has been applied to every connection.

type serverState struct {
	mu       sync.Mutex
	kvs      map[string]map[string]sp.SerializedUpdate
	status   map[string]sp.SyncStatus
	conns    map[*serverConn]bool
	silenced bool
}

type serverConn struct {
	conn   net.Conn
	syncer string
	out    chan any // messages for this connection's writer, in order
	quit   chan struct{}
	once   sync.Once
}

func (c *serverConn) close() {
	c.once.Do(func() { close(c.quit); c.conn.Close() })
}

type command struct {
	Op       string `json:"op"`
	Syncer   string `json:"syncer"`
	Key      string `json:"key"`
	Value    string `json:"value"`
	Revision string `json:"revision"`
	Status   int    `json:"status"`
}

func runServer(args []string) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	ping := fs.Duration("ping", 10*time.Second, "ping interval (Typha's PingIntervalSecs)")
	batch := fs.Int("batch", 100, "KVs per snapshot message")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gobtool server:", err)
		return 1
	}
	st := &serverState{kvs: map[string]map[string]sp.SerializedUpdate{},
		status: map[string]sp.SyncStatus{}, conns: map[*serverConn]bool{}}
	out := json.NewEncoder(os.Stdout)
	_ = out.Encode(map[string]any{"event": "listening", "port": ln.Addr().(*net.TCPAddr).Port})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go st.serve(conn, *ping, *batch)
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			fmt.Fprintln(os.Stderr, "gobtool server: bad command:", err)
			return 1
		}
		if reply := st.apply(cmd); reply != nil {
			_ = out.Encode(reply)
		}
	}
	return 0 // stdin closed: the test is done
}

func (st *serverState) apply(cmd command) map[string]any {
	st.mu.Lock()
	defer st.mu.Unlock()
	kvs := st.kvs[cmd.Syncer]
	if kvs == nil {
		kvs = map[string]sp.SerializedUpdate{}
		st.kvs[cmd.Syncer] = kvs
	}
	var msg any
	switch cmd.Op {
	case "put":
		value, err := base64.StdEncoding.DecodeString(cmd.Value)
		if err != nil || len(value) == 0 {
			return map[string]any{"event": "error", "error": "put needs a non-empty base64 value"}
		}
		kind := sp.UpdateType(1) // New
		if _, ok := kvs[cmd.Key]; ok {
			kind = 2 // Updated
		}
		u := sp.SerializedUpdate{Key: cmd.Key, Value: value, Revision: cmd.Revision, UpdateType: kind}
		kvs[cmd.Key] = u
		msg = sp.MsgKVs{KVs: []sp.SerializedUpdate{u}}
	case "delete":
		delete(kvs, cmd.Key)
		msg = sp.MsgKVs{KVs: []sp.SerializedUpdate{{Key: cmd.Key, Revision: cmd.Revision, UpdateType: 3}}}
	case "status":
		st.status[cmd.Syncer] = sp.SyncStatus(cmd.Status)
		msg = sp.MsgSyncStatus{SyncStatus: sp.SyncStatus(cmd.Status)}
	case "digest":
		values := map[string][]byte{}
		for k, u := range kvs {
			values[k] = u.Value
		}
		return map[string]any{"event": "digest", "syncer": cmd.Syncer, "kvs": len(values), "digest": digest(values)}
	case "silence":
		st.silenced = true
	case "drop":
		for c := range st.conns {
			c.close()
		}
	default:
		return map[string]any{"event": "error", "error": "unknown op " + cmd.Op}
	}
	if msg != nil && !st.silenced {
		for c := range st.conns {
			if c.syncer == cmd.Syncer {
				select {
				case c.out <- msg:
				default: // a client this far behind is cut off, as Typha drops slow clients
					c.close()
				}
			}
		}
	}
	return map[string]any{"event": "ok", "op": cmd.Op}
}

// serve is one connection: handshake, snapshot, then the writer loop.  The snapshot is taken
// and the connection registered under the lock, so no change falls between them.
func (st *serverState) serve(conn net.Conn, ping time.Duration, batch int) {
	defer conn.Close()
	dec := gob.NewDecoder(conn)
	var env sp.Envelope
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := dec.Decode(&env); err != nil {
		return
	}
	hello, ok := env.Message.(sp.MsgClientHello)
	if !ok {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	syncer := string(hello.SyncerType)
	if syncer == "" {
		syncer = "felix"
	}
	var w io.Writer = conn
	enc := gob.NewEncoder(w)
	flush := func() error { return nil }
	send := func(msg any) error {
		if err := enc.Encode(&sp.Envelope{Message: msg}); err != nil {
			return err
		}
		return flush()
	}
	if err := send(sp.MsgServerHello{Version: "gobtool", SyncerType: sp.SyncerType(syncer),
		SupportsNodeResourceUpdates: true, ServerConnID: 0x5eed000000000001}); err != nil {
		return
	}
	snappyOK := false
	for _, a := range hello.SupportedCompressionAlgorithms {
		snappyOK = snappyOK || a == "snappy"
	}
	if hello.SupportsDecoderRestart && snappyOK {
		if err := send(sp.MsgDecoderRestart{Message: "enable compression: snappy",
			CompressionAlgorithm: "snappy"}); err != nil {
			return
		}
		if err := dec.Decode(&env); err != nil {
			return
		}
		if _, ok := env.Message.(sp.MsgACK); !ok {
			return
		}
		bw := bufio.NewWriter(conn)
		sw := snappy.NewBufferedWriter(bw)
		enc = gob.NewEncoder(sw)
		flush = func() error {
			if err := sw.Flush(); err != nil {
				return err
			}
			return bw.Flush()
		}
	}
	go func() { // pongs (and anything else the client sends) are read and dropped
		var ignored sp.Envelope
		for dec.Decode(&ignored) == nil {
		}
	}()

	c := &serverConn{conn: conn, syncer: syncer, out: make(chan any, 10000), quit: make(chan struct{})}
	st.mu.Lock()
	kvs := st.kvs[syncer]
	keys := make([]string, 0, len(kvs))
	for k := range kvs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	snapshot := make([]sp.SerializedUpdate, 0, len(keys))
	for _, k := range keys {
		u := kvs[k]
		u.UpdateType = 1 // every snapshot entry is New
		snapshot = append(snapshot, u)
	}
	status := st.status[syncer]
	silenced := st.silenced
	st.conns[c] = true
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.conns, c)
		st.mu.Unlock()
		c.close()
	}()
	if silenced {
		<-c.quit
		return
	}
	for i := 0; i < len(snapshot); i += batch {
		end := i + batch
		if end > len(snapshot) {
			end = len(snapshot)
		}
		if err := send(sp.MsgKVs{KVs: snapshot[i:end]}); err != nil {
			return
		}
	}
	if status != 0 {
		if err := send(sp.MsgSyncStatus{SyncStatus: status}); err != nil {
			return
		}
	}
	ticker := time.NewTicker(ping)
	defer ticker.Stop()
	for {
		var msg any
		select {
		case <-c.quit:
			return
		case msg = <-c.out:
		case now := <-ticker.C:
			st.mu.Lock()
			silenced = st.silenced
			st.mu.Unlock()
			if silenced {
				continue
			}
			msg = sp.MsgPing{Timestamp: now}
		}
		if err := send(msg); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				fmt.Fprintln(os.Stderr, "gobtool server: write:", err)
			}
			return
		}
	}
}
