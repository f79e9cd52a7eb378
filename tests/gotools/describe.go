package main

import (
	"encoding/hex"
	"fmt"
	"time"

	sp "triotypha.test/gotools/syncproto"
)

// describe renders a decoded Envelope's message as JSON-friendly data with Go's field names,
// so the Python tests can compare it with their own decoding.  Byte slices and times are hex.
func describe(msg any) map[string]any {
	switch m := msg.(type) {
	case nil:
		return map[string]any{"type": nil}
	case sp.MsgClientHello:
		algs := []string{}
		for _, a := range m.SupportedCompressionAlgorithms {
			algs = append(algs, string(a))
		}
		return map[string]any{"type": "MsgClientHello", "Hostname": m.Hostname, "Info": m.Info,
			"Version": m.Version, "SyncerType": string(m.SyncerType),
			"SupportsDecoderRestart": m.SupportsDecoderRestart, "SupportedCompressionAlgorithms": algs,
			"SupportsModernPolicyKeys": m.SupportsModernPolicyKeys, "ClientConnID": m.ClientConnID}
	case sp.MsgServerHello:
		return map[string]any{"type": "MsgServerHello", "Version": m.Version,
			"SyncerType": string(m.SyncerType), "SupportsNodeResourceUpdates": m.SupportsNodeResourceUpdates,
			"ServerConnID": m.ServerConnID}
	case sp.MsgDecoderRestart:
		return map[string]any{"type": "MsgDecoderRestart", "Message": m.Message,
			"CompressionAlgorithm": string(m.CompressionAlgorithm)}
	case sp.MsgACK:
		return map[string]any{"type": "MsgACK"}
	case sp.MsgSyncStatus:
		return map[string]any{"type": "MsgSyncStatus", "SyncStatus": int(m.SyncStatus)}
	case sp.MsgPing:
		return map[string]any{"type": "MsgPing", "Timestamp": describeTime(m.Timestamp)}
	case sp.MsgPong:
		return map[string]any{"type": "MsgPong", "PingTimestamp": describeTime(m.PingTimestamp),
			"PongTimestamp": describeTime(m.PongTimestamp)}
	case sp.MsgKVs:
		kvs := []any{}
		for _, u := range m.KVs {
			kvs = append(kvs, describeUpdate(u))
		}
		return map[string]any{"type": "MsgKVs", "KVs": kvs}
	default:
		return map[string]any{"type": fmt.Sprintf("%T", m), "text": fmt.Sprintf("%v", m)}
	}
}

func describeUpdate(u sp.SerializedUpdate) map[string]any {
	// gob cannot tell a nil []byte from an empty one: both are omitted and decode as nil.
	d := map[string]any{"Key": u.Key, "Value": hex.EncodeToString(u.Value), "ValueNil": len(u.Value) == 0,
		"V3ResourceVersion": u.V3ResourceVersion, "TTL": int64(u.TTL), "UpdateType": int(u.UpdateType)}
	if u.Revision == nil {
		d["Revision"] = nil
	} else {
		d["Revision"] = map[string]any{"go_type": fmt.Sprintf("%T", u.Revision), "text": fmt.Sprintf("%v", u.Revision)}
	}
	return d
}

func describeTime(t time.Time) map[string]any {
	bin, err := t.MarshalBinary()
	binHex := ""
	if err == nil {
		binHex = hex.EncodeToString(bin)
	}
	_, offset := t.Zone()
	return map[string]any{"bin": binHex, "unix": t.Unix(), "nsec": t.Nanosecond(), "offset": offset,
		"utc": t.Location() == time.UTC, "zero": t.IsZero()}
}
