package proxy

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Memory is bounded by configuration, not by clients: what an idle client
// costs, what a client that stops reading a large result costs, and what a
// client that announces a large message costs.

// TestAnnouncedMessageNotReserved: a client that announces a Query of
// max_message_bytes and sends a little of it costs the proxy about what it
// sent, not what it announced: the message buffer grows as bytes arrive.
func TestAnnouncedMessageNotReserved(t *testing.T) {
	p := startProxy(t, Config{}) // max_message_bytes: 64 MiB
	const clients = 4
	heapAlloc := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var raws []*rawClient
	for range clients {
		pc, err := pgconn.Connect(testContext(t), p.connString(t, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		hc, err := pc.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		raw := &rawClient{hc.Conn}
		t.Cleanup(func() { _ = raw.Close() })
		raws = append(raws, raw)
	}
	before := heapAlloc()
	for _, raw := range raws {
		msg := []byte{'Q', 0, 0, 0, 0}
		binary.BigEndian.PutUint32(msg[1:], DefaultMaxMessageBytes-1)
		msg = append(msg, "SELECT '"...)
		msg = append(msg, strings.Repeat("x", 64<<10)...)
		if _, err := raw.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	// The proxy reads what was sent within moments; the largest heap seen
	// over half a second is what it holds.
	grown := int64(0)
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		grown = max(grown, heapAlloc()-before)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d clients that announced %d MiB and sent 64 KiB: the heap grew by %d KiB",
		clients, DefaultMaxMessageBytes>>20, grown>>10)
	if limit := int64(clients) << 20; grown > limit {
		t.Errorf("the heap grew by %d KiB, want at most %d KiB", grown>>10, limit>>10)
	}
}
