package leakcheck

import (
	"testing"
	"time"
)

func parkedForLeakTest(stop <-chan struct{}) { <-stop }

func TestLeakedFindsAndForgets(t *testing.T) {
	stop := make(chan struct{})
	go parkedForLeakTest(stop)
	deadline := time.Now().Add(5 * time.Second)
	for len(Leaked("leakcheck.parkedForLeakTest")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a running goroutine was not reported")
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	Check(t, "leakcheck.parkedForLeakTest")
	if got := Leaked("leakcheck.TestLeakedFindsAndForgets"); len(got) != 0 {
		t.Fatalf("the calling goroutine was reported: %v", got)
	}
}
