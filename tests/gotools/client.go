package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net"
	"os"
	"sort"
	"time"

	sp "triotypha.test/gotools/syncproto"
)

// clientSummary is what the client prints (as JSON lines) for the Python test to check.
type clientSummary struct {
	Event            string           `json:"event"`
	ServerHello      map[string]any   `json:"server_hello,omitempty"`
	Restarts         []map[string]any `json:"restarts"`
	SnapshotKVs      int              `json:"snapshot_kvs"`
	SnapshotMsgs     int              `json:"snapshot_msgs"`
	SnapshotMaxBatch int              `json:"snapshot_max_batch"`
	SnapshotSorted   bool             `json:"snapshot_sorted"`
	SnapshotAllNew   bool             `json:"snapshot_all_new"`
	Statuses         []int            `json:"statuses"`
	Deltas           int              `json:"deltas"`
	DeltaMsgs        int              `json:"delta_msgs"`
	Pings            int              `json:"pings"`
	KVs              int              `json:"kvs"`
	Digest           string           `json:"digest"`
	Error            string           `json:"error,omitempty"`
}

// runClient connects one client (see session) and prints a summary of everything it received.
func runClient(args []string) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "", "server address host:port")
	syncer := fs.String("syncer", "felix", "syncer type to request")
	legacy := fs.Bool("legacy", false, "announce no decoder restart / compression")
	noModern := fs.Bool("no-modern-keys", false, "leave SupportsModernPolicyKeys false")
	hostname := fs.String("hostname", "gobtool", "hostname to send")
	expectDeltas := fs.Int("expect-deltas", 0, "exit after this many updates past the snapshot")
	expectPings := fs.Int("expect-pings", 0, "exit after answering this many pings")
	timeout := fs.Duration("timeout", 20*time.Second, "overall deadline")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	sum := clientSummary{Event: "done", SnapshotSorted: true, SnapshotAllNew: true, Restarts: []map[string]any{}, Statuses: []int{}}
	fail := func(err error) int {
		sum.Event = "error"
		sum.Error = err.Error()
		_ = out.Encode(sum)
		return 1
	}

	conn, err := net.DialTimeout("tcp", *addr, 10*time.Second)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(*timeout))
	hello := helloOptions{Syncer: *syncer, Hostname: *hostname, Legacy: *legacy,
		NoModernKeys: *noModern, ConnID: 0x4242000000000001}

	kvs := map[string][]byte{}
	inSync := false
	lastKey := ""
	err = session(conn, hello, 0, func(msg any) (bool, error) {
		switch m := msg.(type) {
		case sp.MsgServerHello:
			sum.ServerHello = describe(m)
		case sp.MsgDecoderRestart:
			sum.Restarts = append(sum.Restarts, describe(m))
		case sp.MsgKVs:
			for _, u := range m.KVs {
				if u.Value == nil {
					delete(kvs, u.Key)
				} else {
					kvs[u.Key] = u.Value
				}
				if !inSync {
					if u.Key <= lastKey {
						sum.SnapshotSorted = false
					}
					lastKey = u.Key
					if u.UpdateType != 1 {
						sum.SnapshotAllNew = false
					}
				}
			}
			if inSync {
				sum.Deltas += len(m.KVs)
				sum.DeltaMsgs++
			} else {
				sum.SnapshotKVs += len(m.KVs)
				sum.SnapshotMsgs++
				if len(m.KVs) > sum.SnapshotMaxBatch {
					sum.SnapshotMaxBatch = len(m.KVs)
				}
			}
		case sp.MsgSyncStatus:
			sum.Statuses = append(sum.Statuses, int(m.SyncStatus))
			if m.SyncStatus == statusInSync && !inSync {
				inSync = true
				_ = out.Encode(map[string]any{"event": "in-sync", "kvs": len(kvs)})
			}
		case sp.MsgPing:
			sum.Pings++
		}
		return inSync && sum.Deltas >= *expectDeltas && sum.Pings >= *expectPings, nil
	})
	if err != nil {
		return fail(err)
	}
	sum.KVs = len(kvs)
	sum.Digest = digest(kvs)
	_ = out.Encode(sum)
	return 0
}

// digest is sha256 over "key\x00value\n" lines in key order.
func digest(kvs map[string][]byte) string {
	keys := make([]string, 0, len(kvs))
	for k := range kvs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(kvs[k])
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}
