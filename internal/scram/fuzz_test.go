package scram

import (
	"errors"
	"testing"
)

// FuzzMessages feeds the four message parsers and the verifier parser
// arbitrary input: each either parses or returns an error, never panics.
func FuzzMessages(f *testing.F) {
	for _, s := range []string{
		rfcClientFirst, rfcServerFirst, rfcClientFinal, rfcServerFinal,
		"n,,n=,r=abc,x=1", "y,,n=,r=abc", "p=tls-server-end-point,,n=,r=abc", "n,a=x,n=,r=a",
		"c=biws,r=abc,x=1,p=AAAA", "e=invalid-proof", "m=x,r=a,s=AAAA,i=1",
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
		"", ",", "=", "a=", "n,,n=,r=a,", "c=,r=,p=",
	} {
		f.Add(s)
	}
	v := &Verifier{Iterations: 1, Salt: []byte("salt")}
	f.Fuzz(func(t *testing.T, msg string) {
		_, _ = ParseVerifier(msg)
		s := NewServer(v)
		if _, err := s.First([]byte(msg)); err != nil {
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("First(%q) = %v, want a *MalformedError", msg, err)
			}
		}
		s = NewServer(v)
		s.nonce = "srv"
		if _, err := s.First([]byte("n,,n=,r=cli")); err != nil {
			t.Fatal(err)
		}
		_, _, _ = s.Final([]byte(msg))

		c := NewPasswordClient("p")
		c.nonce = "a"
		c.First()
		_, _ = c.Final([]byte(msg))
		c = NewPasswordClient("p")
		c.nonce = "a"
		c.First()
		if _, err := c.Final([]byte("r=ab,s=AAAA,i=1")); err != nil {
			t.Fatal(err)
		}
		_ = c.Verify([]byte(msg))
	})
}
