package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
	"go.uber.org/goleak"
)

// testPool is a pool of ttl_trust servers on the test server, with its
// logins counted.
type testPool struct {
	*pool
	logins atomic.Int64
}

func newTestPool(t *testing.T, cfg poolConfig, db *dbSlots, login loginFunc) *testPool {
	t.Helper()
	srv := newLoginServer(t)
	ensureRole(t, roleSQL("ttl_trust", "unused"))
	if login == nil {
		login = srv.loginServer
	}
	tp := &testPool{}
	counted := func(ctx context.Context, lg serverLogin) (*serverConn, *upstream.Welcome, error) {
		tp.logins.Add(1)
		return login(ctx, lg)
	}
	params := map[string]string{"user": "ttl_trust", "database": "postgres"}
	tp.pool = newPool(poolKey{database: "postgres", user: "ttl_trust", params: keyParams(params), settings: "test"}, params, cfg, counted, db)
	tp.setSecret(&auth.Login{})
	t.Cleanup(tp.close)
	return tp
}

func mustAcquire(t *testing.T, p *testPool, client uint64) *pooledServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := p.acquire(ctx, client)
	if err != nil {
		t.Fatalf("acquire for client %d: %v", client, err)
	}
	return ps
}

// backendPID is the server process ID from the BackendKeyData.
func backendPID(ps *pooledServer) uint32 { return binary.BigEndian.Uint32(ps.welcome.Key) }

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPoolReuseLIFO(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 3}, nil, nil)
	a, b := mustAcquire(t, p, 1), mustAcquire(t, p, 2)
	if backendPID(a) == backendPID(b) {
		t.Fatal("two clients share a backend")
	}
	p.release(a, 1, true)
	p.release(b, 2, true)
	// A new client gets the top of the stack: the server released last.
	if got := mustAcquire(t, p, 3); got != b {
		t.Fatalf("client 3 got backend %d, want the last released %d", backendPID(got), backendPID(b))
	} else {
		p.release(got, 3, true)
	}
	// Client 1 gets back the server it held, which nobody held since.
	if got := mustAcquire(t, p, 1); got != a {
		t.Fatalf("client 1 got backend %d, want its own %d", backendPID(got), backendPID(a))
	} else {
		p.release(got, 1, true)
	}
	// Client 2's server was held by client 3 since: client 2 gets the top.
	if got := mustAcquire(t, p, 2); got != a {
		t.Fatalf("client 2 got backend %d, want the top of the stack %d", backendPID(got), backendPID(a))
	} else {
		p.release(got, 2, true)
	}
	if n := p.logins.Load(); n != 2 {
		t.Fatalf("%d logins, want 2", n)
	}
	if got := serverQuery(t, a.sc, "SELECT 1"); got != "1" {
		t.Fatalf("reused server answered %q", got)
	}
}

func TestPoolWaitersFIFO(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 1}, nil, nil)
	held := mustAcquire(t, p, 100)
	const n = 5
	order := make(chan uint64, n)
	var wg sync.WaitGroup
	for i := range uint64(n) {
		client := i + 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps, err := p.acquire(context.Background(), client)
			if err != nil {
				t.Errorf("client %d: %v", client, err)
				return
			}
			order <- client
			p.release(ps, client, true)
		}()
		// Enqueue one at a time, so that the queue's order is known.
		waitFor(t, "the waiter to queue", func() bool { return p.stats().waiting == int(client) })
	}
	if s := p.stats(); s.longestWait <= 0 || s.active != 1 {
		t.Fatalf("stats %+v", s)
	}
	p.release(held, 100, true)
	wg.Wait()
	close(order)
	want := uint64(1)
	for got := range order {
		if got != want {
			t.Fatalf("client %d served as number %d", got, want)
		}
		want++
	}
	if n := p.logins.Load(); n != 1 {
		t.Fatalf("%d logins for a pool of 1", n)
	}
}

func TestPoolQueryWaitTimeout(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 1, waitTimeout: 100 * time.Millisecond}, nil, nil)
	held := mustAcquire(t, p, 1)
	start := time.Now()
	_, err := p.acquire(context.Background(), 2)
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) || pe.Code != codeTooManyConnections {
		t.Fatalf("err = %v, want SQLSTATE %s", err, codeTooManyConnections)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("timed out after %s, before query_wait_timeout", d)
	}
	if s := p.stats(); s.waiting != 0 {
		t.Fatalf("the timed-out waiter is still queued: %+v", s)
	}
	// The server released later goes idle, not to the client that left.
	p.release(held, 1, true)
	if s := p.stats(); s.idle != 1 || s.active != 0 {
		t.Fatalf("stats after release %+v", s)
	}
}

func TestPoolWaiterGone(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 1}, nil, nil)
	held := mustAcquire(t, p, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.acquire(ctx, 2)
		done <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return p.stats().waiting == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	p.release(held, 1, true)
	if s := p.stats(); s.idle != 1 || s.waiting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPoolReserve(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 1, reserveSize: 1, reserveTimeout: 50 * time.Millisecond}, nil, nil)
	held := mustAcquire(t, p, 1)
	got := make(chan *pooledServer, 1)
	go func() {
		ps, err := p.acquire(context.Background(), 2)
		if err != nil {
			t.Error(err)
		}
		got <- ps
	}()
	waitFor(t, "the waiter to queue", func() bool { return p.stats().waiting == 1 })
	// The sweep's tick opens the reserve once the head has waited.
	var ps *pooledServer
	waitFor(t, "a reserve server", func() bool {
		p.maintain()
		select {
		case ps = <-got:
			return true
		default:
			return false
		}
	})
	if ps == nil || ps == held {
		t.Fatal("no reserve server")
	}
	if n := p.logins.Load(); n != 2 {
		t.Fatalf("%d logins, want 2", n)
	}
	// Past size + reserve, no third login: the next client waits.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := p.acquire(ctx, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third client: %v, want to wait", err)
	}
	p.release(held, 1, true)
	p.release(ps, 2, true)
}

func TestPoolMinSizeAndIdleTimeout(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 4, minSize: 2, idleTimeout: 50 * time.Millisecond}, nil, nil)
	p.maintain()
	waitFor(t, "min_pool_size servers", func() bool { return p.stats().idle == 2 })
	var held []*pooledServer
	for i := range uint64(4) {
		held = append(held, mustAcquire(t, p, i+1))
	}
	for i, ps := range held {
		p.release(ps, uint64(i+1), true)
	}
	if s := p.stats(); s.idle != 4 {
		t.Fatalf("stats %+v", s)
	}
	// Idle past server_idle_timeout: closed down to min_pool_size, the
	// oldest idle first (the top of the stack, released last, stays).
	top := held[3]
	time.Sleep(60 * time.Millisecond)
	p.maintain()
	if s := p.stats(); s.idle != 2 {
		t.Fatalf("after the idle timeout: %+v, want min_pool_size 2 idle", s)
	}
	if got := mustAcquire(t, p, 9); got != top {
		t.Fatal("the server released last was closed")
	} else {
		p.release(got, 9, true)
	}
	if n := p.logins.Load(); n != 4 {
		t.Fatalf("%d logins, want 4", n)
	}
}

func TestPoolLifetime(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 2, lifetime: 50 * time.Millisecond}, nil, nil)
	first := mustAcquire(t, p, 1)
	time.Sleep(60 * time.Millisecond)
	p.release(first, 1, true)
	if s := p.stats(); s.idle != 0 {
		t.Fatalf("a server past server_lifetime was kept: %+v", s)
	}
	second := mustAcquire(t, p, 1)
	if second == first || backendPID(second) == backendPID(first) {
		t.Fatal("the expired server was reused")
	}
	p.release(second, 1, false) // state unknown: closed
	if s := p.stats(); s.idle != 0 || s.active != 0 {
		t.Fatalf("an unreusable server was kept: %+v", s)
	}
}

func TestPoolLoginFailure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ensureRole(t, "SET password_encryption = 'scram-sha-256'; "+roleSQL("ttl_scram", "scram-secret"))
	srv := newLoginServer(t)
	params := map[string]string{"user": "ttl_scram", "database": "postgres"}
	var logins atomic.Int64
	login := func(ctx context.Context, lg serverLogin) (*serverConn, *upstream.Welcome, error) {
		logins.Add(1)
		return srv.loginServer(ctx, lg)
	}
	p := newPool(poolKey{database: "postgres", user: "ttl_scram"}, params,
		poolConfig{size: 2, loginRetry: time.Hour}, login, nil)
	defer p.close()
	p.setSecret(&auth.Login{Password: "wrong"})
	_, err := p.acquire(context.Background(), 1)
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) || pe.Code != codeInvalidPassword {
		t.Fatalf("err = %v, want the server's 28P01", err)
	}
	// Within server_login_retry: failed at once, no new login.
	_, err = p.acquire(context.Background(), 2)
	if !errors.As(err, &pe) || pe.Code != codeInvalidPassword || logins.Load() != 1 {
		t.Fatalf("err = %v after %d logins, want 28P01 without a new login", err, logins.Load())
	}
	// After it, with the right password, a login succeeds.
	p.setConfig(poolConfig{size: 2, loginRetry: 0})
	p.setSecret(&auth.Login{Password: "scram-secret"})
	ps, err := p.acquire(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	// The SCRAM keys the password login derived are kept for the next.
	p.mu.Lock()
	k := p.secret.Keys
	p.mu.Unlock()
	if k == nil {
		t.Fatal("keys from the password login not kept")
	}
	p.release(ps, 3, true)
}

func TestPoolDatabaseLimit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	db := newDBSlots(1)
	a := newTestPool(t, poolConfig{size: 2}, db, nil)
	b := newTestPool(t, poolConfig{size: 2}, db, nil)
	held := mustAcquire(t, a, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if _, err := b.acquire(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second pool past max_db_connections: %v, want to wait", err)
	}
	cancel()
	// Released idle in pool a, the slot goes to pool b's waiter: a's idle
	// server is closed for it.
	got := make(chan *pooledServer, 1)
	go func() {
		ps, err := b.acquire(context.Background(), 2)
		if err != nil {
			t.Error(err)
		}
		got <- ps
	}()
	waitFor(t, "the waiter to queue", func() bool { return b.stats().waiting == 1 })
	a.release(held, 1, true)
	var ps *pooledServer
	waitFor(t, "pool b's server", func() bool {
		b.maintain()
		select {
		case ps = <-got:
			return true
		default:
			return false
		}
	})
	if s := a.stats(); s.idle != 0 {
		t.Fatalf("pool a kept its idle server past the database's limit: %+v", s)
	}
	b.release(ps, 2, true)
	if db.used != 1 {
		t.Fatalf("%d slots used, want 1", db.used)
	}
}

func TestPoolClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 1}, nil, nil)
	held := mustAcquire(t, p, 1)
	done := make(chan error, 1)
	go func() {
		_, err := p.acquire(context.Background(), 2)
		done <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return p.stats().waiting == 1 })
	p.close()
	if err := <-done; !errors.Is(err, errPoolClosed) {
		t.Fatalf("waiter: %v, want errPoolClosed", err)
	}
	p.release(held, 1, true)
	if s := p.stats(); s.idle != 0 || s.active != 0 {
		t.Fatalf("closed pool holds servers: %+v", s)
	}
	if _, err := p.acquire(context.Background(), 3); !errors.Is(err, errPoolClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
}

// TestPoolLoginsReservedAsItCloses: logins reserved just before the pool
// closed (the sweep's min_pool_size, a waiter) are not started after it:
// close has returned, and nothing may outlive it.
func TestPoolLoginsReservedAsItCloses(t *testing.T) {
	p := newTestPool(t, poolConfig{size: 2, minSize: 2}, newDBSlots(2), nil)
	p.mu.Lock()
	n := p.startLoginsLocked(monoNow())
	p.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d logins reserved for min_pool_size 2", n)
	}
	p.close()
	p.runLogins(n)
	p.wg.Wait()
	if got := p.logins.Load(); got != 0 {
		t.Fatalf("%d logins started after the pool closed", got)
	}
	if s := p.stats(); s.logins != 0 {
		t.Fatalf("the closed pool still counts %d logins", s.logins)
	}
	for i := range 2 {
		if !p.db.take() {
			t.Fatalf("database slot %d not given back", i+1)
		}
	}
}

// TestPoolConcurrent: many clients on a small pool never open more than
// its size and are all served.
func TestPoolConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := newTestPool(t, poolConfig{size: 3}, nil, nil)
	var inUse, most atomic.Int64
	var wg sync.WaitGroup
	for c := range uint64(20) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				ps, err := p.acquire(context.Background(), c+1)
				if err != nil {
					t.Error(err)
					return
				}
				n := inUse.Add(1)
				for m := most.Load(); n > m; m = most.Load() {
					if most.CompareAndSwap(m, n) {
						break
					}
				}
				inUse.Add(-1)
				p.release(ps, c+1, true)
			}
		}()
	}
	wg.Wait()
	waitFor(t, "the logins in flight", func() bool { return p.stats().logins == 0 })
	if n := p.logins.Load(); n > 3 {
		t.Fatalf("%d logins for a pool of 3", n)
	}
	if m := most.Load(); m > 3 {
		t.Fatalf("%d servers in use at once", m)
	}
	if s := p.stats(); s.active != 0 || s.waiting != 0 || s.idle != int(p.logins.Load()) {
		t.Fatalf("stats %+v after %d logins", s, p.logins.Load())
	}
}
