// Package syncproto mirrors the shapes of Typha's wire messages for interop tests.
//
// These are this project's own definitions, written from docs/typha-protocol.md §2.2: the
// struct and field names and the registered gob names are what goes on the wire, so they
// must match Typha's; nothing else about Typha's code is used.  The package is named
// syncproto so that gob spells the unnamed slice types as Typha does
// ("[]syncproto.CompressionAlgorithm", "[]syncproto.SerializedUpdate").
package syncproto

import (
	"encoding/gob"
	"time"
)

// RegisteredPrefix keeps the pre-monorepo package path, as Typha's registrations do.
const RegisteredPrefix = "github.com/projectcalico/typha/pkg/syncproto."

type SyncerType string
type CompressionAlgorithm string

// SyncStatus and UpdateType are uint8 enums in libcalico-go.
type SyncStatus uint8
type UpdateType uint8

type Envelope struct {
	Message any
}

type MsgClientHello struct {
	Hostname                       string
	Info                           string
	Version                        string
	SyncerType                     SyncerType
	SupportsDecoderRestart         bool
	SupportedCompressionAlgorithms []CompressionAlgorithm
	SupportsModernPolicyKeys       bool
	ClientConnID                   uint64
}

type MsgServerHello struct {
	Version                     string
	SyncerType                  SyncerType
	SupportsNodeResourceUpdates bool
	ServerConnID                uint64
}

type MsgDecoderRestart struct {
	Message              string
	CompressionAlgorithm CompressionAlgorithm
}

type MsgACK struct{}

type MsgSyncStatus struct {
	SyncStatus SyncStatus
}

type MsgPing struct {
	Timestamp time.Time
}

type MsgPong struct {
	PingTimestamp time.Time
	PongTimestamp time.Time
}

type MsgKVs struct {
	KVs []SerializedUpdate
}

type SerializedUpdate struct {
	Key               string
	Value             []byte
	Revision          any
	V3ResourceVersion string
	TTL               time.Duration
	UpdateType        UpdateType
}

func init() {
	gob.RegisterName(RegisteredPrefix+"MsgClientHello", MsgClientHello{})
	gob.RegisterName(RegisteredPrefix+"MsgDecoderRestart", MsgDecoderRestart{})
	gob.RegisterName(RegisteredPrefix+"MsgACK", MsgACK{})
	gob.RegisterName(RegisteredPrefix+"MsgServerHello", MsgServerHello{})
	gob.RegisterName(RegisteredPrefix+"MsgSyncStatus", MsgSyncStatus{})
	gob.RegisterName(RegisteredPrefix+"MsgPing", MsgPing{})
	gob.RegisterName(RegisteredPrefix+"MsgPong", MsgPong{})
	gob.RegisterName(RegisteredPrefix+"MsgKVs", MsgKVs{})
}
