package scram

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// The exchange of RFC 7677 §3: user "user", password "pencil".
const (
	rfcClientNonce = "rOprNGfwEbeRWgbNEkqO"
	rfcServerNonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	rfcClientFirst = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
	rfcServerFirst = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
	rfcClientFinal = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	rfcServerFinal = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
)

func rfcVerifier(t *testing.T) *Verifier {
	t.Helper()
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	v, err := NewVerifier("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRFC7677Client(t *testing.T) {
	c := NewPasswordClient("pencil")
	c.user, c.nonce = "user", rfcClientNonce
	if got := string(c.First()); got != rfcClientFirst {
		t.Fatalf("client-first-message = %q, want %q", got, rfcClientFirst)
	}
	final, err := c.Final([]byte(rfcServerFirst))
	if err != nil {
		t.Fatal(err)
	}
	if string(final) != rfcClientFinal {
		t.Fatalf("client-final-message = %q, want %q", final, rfcClientFinal)
	}
	if err := c.Verify([]byte(rfcServerFinal)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := c.Verify([]byte("v=" + base64.StdEncoding.EncodeToString(make([]byte, 32)))); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("Verify of a wrong signature = %v, want ErrAuthFailed", err)
	}
}

func TestRFC7677Server(t *testing.T) {
	v := rfcVerifier(t)
	s := NewServer(v)
	s.nonce = rfcServerNonce
	first, err := s.First([]byte(rfcClientFirst))
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != rfcServerFirst {
		t.Fatalf("server-first-message = %q, want %q", first, rfcServerFirst)
	}
	final, keys, err := s.Final([]byte(rfcClientFinal))
	if err != nil {
		t.Fatal(err)
	}
	if string(final) != rfcServerFinal {
		t.Fatalf("server-final-message = %q, want %q", final, rfcServerFinal)
	}
	want, _ := PasswordKeys("pencil", v.Salt, 4096)
	if keys.ClientKey != want.ClientKey || keys.ServerKey != want.ServerKey {
		t.Fatal("the recovered keys are not the password's")
	}

	// The recovered keys log in without the password: the same exchange
	// again, the client made from the keys.
	c := NewClient(keys)
	c.user, c.nonce = "user", rfcClientNonce
	c.First()
	got, err := c.Final([]byte(rfcServerFirst))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != rfcClientFinal {
		t.Fatalf("client-final-message from keys = %q, want %q", got, rfcClientFinal)
	}
	if err := c.Verify([]byte(rfcServerFinal)); err != nil {
		t.Fatal(err)
	}
}

func TestVerifierText(t *testing.T) {
	v := rfcVerifier(t)
	const want = "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
	if got := v.String(); got != want {
		t.Fatalf("verifier = %q, want %q", got, want)
	}
	back, err := ParseVerifier(want)
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != want {
		t.Fatalf("round trip = %q", back.String())
	}
	if !IsVerifier(want) || IsVerifier("md5abc") {
		t.Fatal("IsVerifier")
	}
}

func TestParseVerifierErrors(t *testing.T) {
	const key = "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
	for _, in := range []string{
		"",
		"md5" + strings.Repeat("0", 32),
		"SCRAM-SHA-256$",
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==",
		"SCRAM-SHA-256$4096$" + key + ":" + key,
		"SCRAM-SHA-256$x:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":" + key,
		"SCRAM-SHA-256$0:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":" + key,
		"SCRAM-SHA-256$-1:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":" + key,
		"SCRAM-SHA-256$99999999999:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":" + key,
		"SCRAM-SHA-256$4096:$" + key + ":" + key,
		"SCRAM-SHA-256$4096:!!$" + key + ":" + key,
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$" + key,
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":",
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$:" + key,
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":AAAA",
		"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$" + key + ":" + key + "$",
	} {
		_, err := ParseVerifier(in)
		var me *MalformedError
		if !errors.As(err, &me) {
			t.Errorf("ParseVerifier(%q) = %v, want a *MalformedError", in, err)
		}
	}
}

func TestWrongPassword(t *testing.T) {
	v := rfcVerifier(t)
	s := NewServer(v)
	c := NewPasswordClient("pencil2")
	first, err := s.First(c.First())
	if err != nil {
		t.Fatal(err)
	}
	final, err := c.Final(first)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Final(final); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("Final = %v, want ErrAuthFailed", err)
	}
}

func TestMockVerifier(t *testing.T) {
	secret := []byte("process secret")
	a, b := MockVerifier("alice", secret), MockVerifier("alice", secret)
	if string(a.Salt) != string(b.Salt) || string(a.Salt) == string(MockVerifier("bob", secret).Salt) {
		t.Fatal("a mock salt is per user and stable")
	}
	for _, pw := range []string{"", "pencil"} {
		s := NewServer(a)
		c := NewPasswordClient(pw)
		first, err := s.First(c.First())
		if err != nil {
			t.Fatal(err)
		}
		final, err := c.Final(first)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Final(final); !errors.Is(err, ErrAuthFailed) {
			t.Fatalf("Final against a mock = %v, want ErrAuthFailed", err)
		}
	}
}

func TestKeysMismatch(t *testing.T) {
	v := rfcVerifier(t)
	keys, _ := PasswordKeys("pencil", []byte("another salt"), 4096)
	s := NewServer(v)
	c := NewClient(keys)
	first, err := s.First(c.First())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Final(first); !errors.Is(err, ErrKeysMismatch) {
		t.Fatalf("Final = %v, want ErrKeysMismatch", err)
	}
}

func TestNormalize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"pencil", "pencil"},
		{"a\x01b", "a\x01b"},               // ASCII: as it is, controls too
		{"I\u00adX", "IX"},                 // soft hyphen maps to nothing
		{"\u2168", "IX"},                   // NFKC
		{"a\u00a0b", "a b"},                // non-ASCII space
		{"\xff\xfe", "\xff\xfe"},           // not UTF-8: raw
		{"a\u0007\u00e9", "a\u0007\u00e9"}, // prohibited control: raw
	} {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestMalformedClientFirst(t *testing.T) {
	for _, in := range []string{
		"",
		"n",
		"n,",
		"x,,n=,r=abc",
		"n;,n=,r=abc",
		"p=tls-server-end-point,,n=,r=abc",
		"n,a=admin,n=,r=abc",
		"n,x,n=,r=abc",
		"n,,",
		"n,,m=ext,n=,r=abc",
		"n,,r=abc",
		"n,,n=",
		"n,,n=,",
		"n,,n=,x=abc",
		"n,,n=,r=",
		"n,,n=,r=a\x01b",
		"n,,n=,r=abc,",
		"n,,n=,r=abc,=x",
		"n,,n=,r=abc,xyz",
	} {
		_, err := NewServer(&Verifier{Iterations: 1, Salt: []byte{1}}).First([]byte(in))
		var me *MalformedError
		if !errors.As(err, &me) {
			t.Errorf("First(%q) = %v, want a *MalformedError", in, err)
		}
	}
	// Allowed: "y", a user name (ignored), extensions after the nonce.
	for _, in := range []string{"y,,n=,r=abc", "n,,n=someone,r=abc", "n,,n=,r=abc,x=1"} {
		if _, err := NewServer(&Verifier{Iterations: 1, Salt: []byte{1}}).First([]byte(in)); err != nil {
			t.Errorf("First(%q) = %v", in, err)
		}
	}
}

func TestMalformedClientFinal(t *testing.T) {
	v := rfcVerifier(t)
	proof := ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
	nonce := ",r=" + rfcClientNonce + rfcServerNonce
	for _, in := range []string{
		"",
		"c=biws",
		"c=biws" + nonce,
		"c=biws" + nonce + ",",
		"r=x,c=biws" + proof,
		"c=!!!" + nonce + proof,
		"c=eSws" + nonce + proof, // "y,," but the first message said "n"
		"c=biws,r=other" + proof,
		"c=biws" + nonce + ",p=AAAA",
		"c=biws" + nonce + ",p=!!",
		"c=biws" + nonce + proof + ",x=1",
		"c=biws" + nonce + proof + ",",
		"c=biws" + proof,
		"c=biws,p=x" + nonce,
	} {
		s := NewServer(v)
		s.nonce = rfcServerNonce
		if _, err := s.First([]byte(rfcClientFirst)); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.Final([]byte(in))
		var me *MalformedError
		if !errors.As(err, &me) {
			t.Errorf("Final(%q) = %v, want a *MalformedError", in, err)
		}
	}
	// An extension before the proof is part of the signed message.
	s := NewServer(v)
	if _, _, err := s.Final([]byte(rfcClientFinal)); err == nil {
		t.Error("Final before First succeeded")
	}
}

func TestMalformedServerMessages(t *testing.T) {
	for _, in := range []string{
		"",
		"m=ext,r=abcdef,s=AAAA,i=1",
		"r=abc,s=AAAA,i=1", // does not extend the client's nonce
		"r=abcdef",
		"r=abcdef,s=AAAA",
		"r=abcdef,s=,i=1",
		"r=abcdef,s=!!,i=1",
		"r=abcdef,s=AAAA,i=0",
		"r=abcdef,s=AAAA,i=x",
		"r=abcdef,s=AAAA,i=999999999",
		"r=abcdef,s=AAAA,i=1,",
		"s=AAAA,r=abcdef,i=1",
		"r=abc\x7fdef,s=AAAA,i=1",
	} {
		c := NewPasswordClient("pencil")
		c.nonce = "abc"
		c.First()
		_, err := c.Final([]byte(in))
		var me *MalformedError
		if !errors.As(err, &me) {
			t.Errorf("Final(%q) = %v, want a *MalformedError", in, err)
		}
	}
	for _, in := range []string{"", "x=1", "v=!!", "v=AAAA", "v=" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ",", "e=invalid-proof"} {
		c := NewPasswordClient("pencil")
		c.nonce = "abc"
		c.First()
		if _, err := c.Final([]byte("r=abcdef,s=AAAA,i=1")); err != nil {
			t.Fatal(err)
		}
		if err := c.Verify([]byte(in)); err == nil {
			t.Errorf("Verify(%q) succeeded", in)
		}
	}
}
