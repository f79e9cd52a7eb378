package main

import (
	"bytes"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/golang/snappy"
	sp "triotypha.test/gotools/syncproto"
)

// The vectors are written in a fixed order from one process: gob type ids are process-global
// and handed out in first-use order, so the Python test replays the same order to reproduce
// the bytes.  Every vector uses a fresh gob.Encoder (a fresh "types sent" set).

var pingTime = time.Unix(1700000000, 5)

func fixedTimes() []struct {
	name string
	t    time.Time
} {
	return []struct {
		name string
		t    time.Time
	}{
		{"local", pingTime},
		{"utc", pingTime.UTC()},
		{"ist", pingTime.In(time.FixedZone("IST", 5*3600+30*60))},
		{"pst", pingTime.In(time.FixedZone("PST", -8*3600))},
		{"lmt_pos", time.Date(1890, 3, 1, 12, 0, 0, 999999999, time.FixedZone("LMT", 3600+75))},
		{"lmt_neg", time.Date(1890, 3, 1, 12, 0, 0, 0, time.FixedZone("LMT", -(3600+75)))},
		{"zero", time.Time{}},
		{"zero_instant_in_zone", time.Date(1, 1, 1, 0, 0, 0, 0, time.FixedZone("X", 3600))},
		{"pre_epoch", time.Date(1901, 12, 13, 20, 45, 52, 1, time.UTC)},
		{"far_future", time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
	}
}

type vector struct {
	Name     string           `json:"name"`
	File     string           `json:"file"`
	Messages []map[string]any `json:"messages"`
}

type singleton struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Kind  string `json:"kind"`
	Value any    `json:"value"`
}

type timeVector struct {
	Name          string `json:"name"`
	Bin           string `json:"bin"`
	Unix          int64  `json:"unix"`
	Nsec          int    `json:"nsec"`
	Offset        int    `json:"offset"`
	UTC           bool   `json:"utc"`
	DecodedOffset int    `json:"decoded_offset"`
	DecodedUTC    bool   `json:"decoded_utc"`
	Reencoded     string `json:"reencoded"`
}

type snappyVector struct {
	Name    string `json:"name"`
	Input   string `json:"input"`
	Output  string `json:"output"`
	Flushes []int  `json:"flushes"`
}

func writeVectors(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	manifest := map[string]any{"go_version": runtime.Version()}

	kvsFirst := sp.MsgKVs{KVs: []sp.SerializedUpdate{{Key: "/calico/v1/config/foobar", Value: []byte("baz"),
		Revision: "1234", UpdateType: 1}}}
	kvsDelete := sp.MsgKVs{KVs: []sp.SerializedUpdate{{Key: "/calico/v1/config/foobar", Revision: "1235",
		UpdateType: 3}}}
	kvsMixed := sp.MsgKVs{KVs: []sp.SerializedUpdate{
		{Key: "/calico/resources/v3/projectcalico.org/nodes/node1", Value: []byte(`{"kind":"Node","metadata":{"name":"node1","resourceVersion":""}}`),
			Revision: "987", V3ResourceVersion: "987", UpdateType: 2},
		{Key: "/calico/v1/host/node1/bird_ip", Value: []byte("10.0.0.1"), Revision: "", UpdateType: 1},
		{Key: "/calico/v1/config/ttl", Value: []byte{0, 1, 2, 0xff}, Revision: "5", TTL: 90 * time.Second, UpdateType: 1},
		{Key: "/calico/v1/config/négatif", Value: []byte("ünïcode"), Revision: "6", TTL: -1, UpdateType: 2},
		{Key: "/calico/v1/config/gone", Revision: "7", UpdateType: 3},
	}}
	var big sp.MsgKVs
	for i := 0; i < 300; i++ {
		big.KVs = append(big.KVs, sp.SerializedUpdate{Key: fmt.Sprintf("/calico/v1/host/h%04d/config/x", i),
			Value: []byte(strings.Repeat("v", i%37)), Revision: fmt.Sprint(i), UpdateType: 1})
	}
	revisions := sp.MsgKVs{KVs: []sp.SerializedUpdate{
		{Key: "/int64", Value: []byte("a"), Revision: int64(-7), UpdateType: 1},
		{Key: "/uint64", Value: []byte("a"), Revision: uint64(1 << 63), UpdateType: 1},
		{Key: "/int", Value: []byte("a"), Revision: 42, UpdateType: 1},
		{Key: "/bool", Value: []byte("a"), Revision: true, UpdateType: 1},
		{Key: "/bytes", Value: []byte("a"), Revision: []byte{1, 2, 3}, UpdateType: 1},
		{Key: "/nil", Value: []byte("a"), Revision: nil, UpdateType: 1},
	}}

	pings := []any{}
	for _, ft := range fixedTimes() {
		if ft.name == "lmt_neg" {
			continue // does not round-trip in Go (see the times vectors)
		}
		pings = append(pings, sp.MsgPing{Timestamp: ft.t})
	}

	groups := []struct {
		name string
		msgs []any
	}{
		{"client_hello_modern", []any{sp.MsgClientHello{Hostname: "n1", Info: "i", Version: "v3", SyncerType: "felix",
			SupportsDecoderRestart: true, SupportedCompressionAlgorithms: []sp.CompressionAlgorithm{"snappy"},
			SupportsModernPolicyKeys: true, ClientConnID: 258}}},
		{"client_stream", []any{
			sp.MsgClientHello{Hostname: "node-7", Info: "Revision: abc; Build date: today", Version: "v3.32.1",
				SyncerType: "bgp", SupportsDecoderRestart: true,
				SupportedCompressionAlgorithms: []sp.CompressionAlgorithm{"zstd", "snappy", ""},
				SupportsModernPolicyKeys:       true, ClientConnID: 0xdeadbeef00000001},
			sp.MsgACK{}, sp.MsgACK{},
			sp.MsgPong{PingTimestamp: pingTime},
			sp.MsgPong{PingTimestamp: pingTime.UTC(), PongTimestamp: pingTime.Add(time.Millisecond)},
		}},
		{"client_hello_legacy", []any{sp.MsgClientHello{Hostname: "old", SyncerType: ""}}},
		{"server_handshake", []any{
			sp.MsgServerHello{Version: "v3.32.1", SyncerType: "felix", SupportsNodeResourceUpdates: true,
				ServerConnID: 0x1234567800000001},
			sp.MsgDecoderRestart{Message: "enable compression: snappy;send binary snapshot", CompressionAlgorithm: "snappy"},
		}},
		{"server_stream", append([]any{kvsFirst, kvsDelete, kvsMixed, sp.MsgKVs{}, big,
			sp.MsgSyncStatus{SyncStatus: 2}, sp.MsgSyncStatus{SyncStatus: 1}, sp.MsgSyncStatus{SyncStatus: 0}},
			append(pings, sp.MsgDecoderRestart{Message: "End of compressed snapshot.", CompressionAlgorithm: "snappy"})...)},
		{"revisions", []any{revisions, sp.MsgKVs{KVs: []sp.SerializedUpdate{{}}}}},
		{"nil_envelope", []any{nil}},
		{"int_envelope", []any{42}},
		{"every_message", []any{
			sp.MsgClientHello{}, sp.MsgServerHello{}, sp.MsgDecoderRestart{}, sp.MsgACK{}, sp.MsgSyncStatus{},
			sp.MsgPing{}, sp.MsgPong{}, sp.MsgKVs{},
		}},
	}
	var vectors []vector
	for _, g := range groups {
		var buf bytes.Buffer
		enc := gob.NewEncoder(&buf)
		v := vector{Name: g.name, File: g.name + ".gob"}
		for _, m := range g.msgs {
			if err := enc.Encode(&sp.Envelope{Message: m}); err != nil {
				return fmt.Errorf("%s: %w", g.name, err)
			}
			v.Messages = append(v.Messages, describe(m))
		}
		if err := os.WriteFile(filepath.Join(dir, v.File), buf.Bytes(), 0o644); err != nil {
			return err
		}
		vectors = append(vectors, v)
	}
	manifest["vectors"] = vectors

	// Top-level singletons of the basic types (no type definitions needed).
	var singles []singleton
	addSingle := func(name, kind string, value any, jsonValue any) error {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(value); err != nil {
			return err
		}
		s := singleton{Name: name, File: "single_" + name + ".gob", Kind: kind, Value: jsonValue}
		singles = append(singles, s)
		return os.WriteFile(filepath.Join(dir, s.File), buf.Bytes(), 0o644)
	}
	ints := []int64{0, 1, -1, 6, 63, 64, -64, -65, 65, 127, 128, 255, 256, -257, 1 << 31, 1 << 62, math.MinInt64, math.MaxInt64}
	for i, x := range ints {
		if err := addSingle(fmt.Sprintf("int_%d", i), "int", x, x); err != nil {
			return err
		}
	}
	uints := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 32, 1 << 56, 1 << 63, math.MaxUint64}
	for i, x := range uints {
		if err := addSingle(fmt.Sprintf("uint_%d", i), "uint", x, x); err != nil {
			return err
		}
	}
	for i, s := range []string{"", "a", "héllo wörld", strings.Repeat("x", 300)} {
		if err := addSingle(fmt.Sprintf("string_%d", i), "string", s, s); err != nil {
			return err
		}
	}
	for i, b := range [][]byte{{}, {0}, {0, 1, 2, 0xff}, bytes.Repeat([]byte{7}, 200)} {
		if err := addSingle(fmt.Sprintf("bytes_%d", i), "bytes", b, hex.EncodeToString(b)); err != nil {
			return err
		}
	}
	for i, b := range []bool{false, true} {
		if err := addSingle(fmt.Sprintf("bool_%d", i), "bool", b, b); err != nil {
			return err
		}
	}
	manifest["singletons"] = singles

	var times []timeVector
	for _, ft := range fixedTimes() {
		bin, err := ft.t.MarshalBinary()
		if err != nil {
			return fmt.Errorf("time %s: %w", ft.name, err)
		}
		var back time.Time
		if err := back.UnmarshalBinary(bin); err != nil {
			return fmt.Errorf("time %s: %w", ft.name, err)
		}
		again, _ := back.MarshalBinary()
		_, off := ft.t.Zone()
		_, boff := back.Zone()
		times = append(times, timeVector{Name: ft.name, Bin: hex.EncodeToString(bin), Unix: ft.t.Unix(),
			Nsec: ft.t.Nanosecond(), Offset: off, UTC: ft.t.Location() == time.UTC,
			DecodedOffset: boff, DecodedUTC: back.Location() == time.UTC, Reencoded: hex.EncodeToString(again)})
	}
	manifest["times"] = times

	// Snappy framed streams as Go's buffered writer produces them.
	rng := rand.New(rand.NewSource(1))
	random70k := make([]byte, 70000)
	rng.Read(random70k)
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog; ", 5000))
	var snaps []snappyVector
	addSnappy := func(name string, writes [][]byte, flush bool) error {
		var out bytes.Buffer
		w := snappy.NewBufferedWriter(&out)
		var in []byte
		var flushes []int
		for _, p := range writes {
			if _, err := w.Write(p); err != nil {
				return err
			}
			in = append(in, p...)
			if flush {
				if err := w.Flush(); err != nil {
					return err
				}
				flushes = append(flushes, out.Len())
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
		sv := snappyVector{Name: name, Input: "snappy_" + name + ".in", Output: "snappy_" + name + ".sz", Flushes: flushes}
		if err := os.WriteFile(filepath.Join(dir, sv.Input), in, 0o644); err != nil {
			return err
		}
		snaps = append(snaps, sv)
		return os.WriteFile(filepath.Join(dir, sv.Output), out.Bytes(), 0o644)
	}
	steps := []struct {
		name   string
		writes [][]byte
		flush  bool
	}{
		{"small", [][]byte{[]byte("hello")}, false},
		{"status_msg", [][]byte{{0x07, 0xff, 0x8c, 0x03, 0x01, 0x02, 0x00, 0x00}}, false},
		{"text", [][]byte{text}, false},
		{"random", [][]byte{random70k}, false},
		{"flushed", [][]byte{[]byte("first message"), text[:1000], random70k[:100]}, true},
	}
	for _, s := range steps {
		if err := addSnappy(s.name, s.writes, s.flush); err != nil {
			return err
		}
	}
	manifest["snappy"] = snaps

	data, err := json.MarshalIndent(manifest, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), data, 0o644)
}
