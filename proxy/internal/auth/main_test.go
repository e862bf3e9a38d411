package auth

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// TestMain starts the tests' PostgreSQL and checks, at the end, that no
// goroutine outlived the tests (the auth query's pool closes its
// connections asynchronously: up to 5 seconds).
func TestMain(m *testing.M) {
	pgtest.Main(m, func() error {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := goleak.Find()
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
