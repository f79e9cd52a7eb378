package main

import (
	"encoding/gob"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/golang/snappy"
	sp "triotypha.test/gotools/syncproto"
)

// statusInSync is libcalico-go's api.InSync.
const statusInSync sp.SyncStatus = 2

// helloOptions is what a client announces in its MsgClientHello.
type helloOptions struct {
	Syncer       string
	Hostname     string
	Legacy       bool // announce neither decoder restarts nor compression
	NoModernKeys bool // leave SupportsModernPolicyKeys false
	ConnID       uint64
}

// session speaks the client side of Typha's protocol on conn, the way calico-node's client
// does: a plain gob encoder and decoder on the raw connection (gob adds its own 4 KiB read
// buffer), and on MsgDecoderRestart a new decoder built on the raw connection (through a
// snappy reader if asked), never carrying over bytes the old one buffered, then a MsgACK.
// Pings are answered with a MsgPong.  This goroutine is the connection's only writer.
//
// Every message is handed to onMsg before the protocol's own reply; session returns nil
// once onMsg asks to stop, or the first error: from onMsg, from the socket (wrapped as
// "decode: ..." when reading), or a protocol violation by the server.  With readTimeout > 0
// each read must complete within it (Felix allows 30 s); the caller owns conn and closes it.
func session(conn net.Conn, hello helloOptions, readTimeout time.Duration,
	onMsg func(msg any) (stop bool, err error)) error {
	enc := gob.NewEncoder(conn)
	dec := gob.NewDecoder(conn)
	msg := sp.MsgClientHello{Hostname: hello.Hostname, Info: "gobtool", Version: "gobtool",
		SyncerType: sp.SyncerType(hello.Syncer), SupportsModernPolicyKeys: !hello.NoModernKeys,
		ClientConnID: hello.ConnID}
	if !hello.Legacy {
		msg.SupportsDecoderRestart = true
		msg.SupportedCompressionAlgorithms = []sp.CompressionAlgorithm{"snappy"}
	}
	if err := enc.Encode(&sp.Envelope{Message: msg}); err != nil {
		return err
	}

	first := true
	for {
		if readTimeout > 0 {
			if err := conn.SetReadDeadline(time.Now().Add(readTimeout)); err != nil {
				return err
			}
		}
		var env sp.Envelope
		if err := dec.Decode(&env); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if _, isHello := env.Message.(sp.MsgServerHello); isHello != first {
			if first {
				return fmt.Errorf("first message was %T, not MsgServerHello", env.Message)
			}
			return errors.New("second MsgServerHello")
		}
		first = false
		stop, err := onMsg(env.Message)
		if err != nil {
			return err
		}
		switch m := env.Message.(type) {
		case sp.MsgServerHello:
			if !m.SupportsNodeResourceUpdates {
				return errors.New("server does not support node resource updates")
			}
		case sp.MsgDecoderRestart:
			if hello.Legacy {
				return errors.New("restart sent to a legacy client")
			}
			switch m.CompressionAlgorithm {
			case "snappy":
				dec = gob.NewDecoder(snappy.NewReader(conn))
			case "":
				dec = gob.NewDecoder(conn)
			default:
				return fmt.Errorf("restart to unknown compression %q", m.CompressionAlgorithm)
			}
			if err := enc.Encode(&sp.Envelope{Message: sp.MsgACK{}}); err != nil {
				return err
			}
		case sp.MsgPing:
			if err := enc.Encode(&sp.Envelope{Message: sp.MsgPong{PingTimestamp: m.Timestamp}}); err != nil {
				return err
			}
		}
		if stop {
			return nil
		}
	}
}
