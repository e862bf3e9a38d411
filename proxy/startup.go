package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// errStartupDone ends a connection that needs no relay (a CancelRequest, or
// a client that gave up during startup).
var errStartupDone = errors.New("startup finished without a session")

// tlsHandshakeRecord is the first byte of a TLS ClientHello: a client using
// direct TLS negotiation (PostgreSQL 17, sslnegotiation=direct) starts with
// it instead of an SSLRequest.
const tlsHandshakeRecord = 0x16

// alpnProtocol is the ALPN protocol name PostgreSQL requires with direct
// TLS negotiation.
const alpnProtocol = "postgresql"

// startup runs the startup phase: SSL/GSS negotiation, CancelRequest, or a
// StartupMessage that is forwarded to a newly dialled upstream connection.
// On success the link's server connection is attached.
func (s *clientConn) startup() error {
	_ = s.nc.SetDeadline(time.Now().Add(s.rs.Load().clientLoginTimeout))
	// Up to the first 8 bytes in one read: no packet of the startup phase
	// is shorter (length and code), and a TLS ClientHello is longer, so
	// nothing of what follows is read.
	var first [8]byte
	n, err := io.ReadAtLeast(s.nc, first[:], 1)
	if err != nil {
		return fmt.Errorf("reading startup packet: %w", err)
	}
	prefix := first[:n]
	tlsConfig := s.srv.tlsConfig
	tlsDone := false
	if first[0] == tlsHandshakeRecord && tlsConfig != nil {
		tc := tls.Server(&wire.PrefixConn{Conn: s.nc, Prefix: prefix}, tlsConfig)
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("direct TLS handshake: %w", err)
		}
		s.setClient(tc)
		if tc.ConnectionState().NegotiatedProtocol != alpnProtocol {
			return &wire.ProtocolError{Code: codeProtocolViolation,
				Msg: "received direct SSL connection request without ALPN protocol negotiation extension"}
		}
		prefix, tlsDone = nil, true
	}
	for {
		pkt, err := wire.ReadStartupPacket(s.nc, prefix)
		prefix = nil
		if err != nil {
			return fmt.Errorf("reading startup packet: %w", err)
		}
		code := binary.BigEndian.Uint32(pkt[4:8])
		switch code {
		case wire.SSLRequestCode:
			if tlsConfig == nil || tlsDone {
				if _, err := s.nc.Write([]byte{'N'}); err != nil {
					return fmt.Errorf("answering SSLRequest: %w", err)
				}
				continue
			}
			if _, err := s.nc.Write([]byte{'S'}); err != nil {
				return fmt.Errorf("answering SSLRequest: %w", err)
			}
			tc := tls.Server(s.nc, tlsConfig)
			if err := tc.Handshake(); err != nil {
				return fmt.Errorf("TLS handshake: %w", err)
			}
			s.setClient(tc)
			tlsDone = true
		case wire.GSSEncRequestCode:
			// No GSSAPI encryption: the client goes on with SSL or plain.
			if _, err := s.nc.Write([]byte{'N'}); err != nil {
				return fmt.Errorf("answering GSSENCRequest: %w", err)
			}
		case wire.CancelRequestCode:
			s.relayCancel(pkt)
			return errStartupDone
		default:
			if err := s.startSession(pkt); err != nil {
				return err
			}
			_ = s.nc.SetDeadline(time.Time{})
			return nil
		}
	}
}

// relayCancel sends the client's CancelRequest unchanged to the upstream
// server: the client holds the server's own BackendKeyData, relayed at
// startup, so process ID and secret key need no translation. In
// transaction mode the key is the proxy's: a key of this instance cancels
// its client's running statement, one of a peer goes to that peer.
func (s *clientConn) relayCancel(pkt []byte) {
	s.srv.metrics.CancelRequests.Inc()
	var req pgproto3.CancelRequest
	if err := req.Decode(pkt[4:]); err != nil {
		s.log.Debug("bad cancel request", "err", err)
		return
	}
	if s.srv.cancelKeys != nil {
		// Transaction mode: the key is the proxy's own (cancel.go), or
		// another instance's (peers.go).
		if s.srv.cancelForPeer(pkt, req.ProcessID) {
			return
		}
		target := s.srv.cancelKeys.lookup(req.ProcessID, req.SecretKey)
		if target == nil {
			s.srv.cancelDropped(cancelUnknown, "cancel request with an unknown key dropped", "pid", req.ProcessID)
			return
		}
		sent, err := s.srv.cancelPooled(target)
		switch {
		case err != nil:
			s.log.Warn("forwarding cancel request", "err", err)
		case sent:
			s.srv.metrics.CancelResults.WithLabelValues(cancelForwarded).Inc()
			s.log.Debug("cancel request forwarded", "session_id", target.id)
		default:
			s.srv.metrics.CancelResults.WithLabelValues(cancelStale).Inc()
			s.log.Debug("cancel request for an idle client dropped", "session_id", target.id)
		}
		return
	}
	if err := s.srv.sendCancel(pkt); err != nil {
		s.log.Warn("relaying cancel request", "err", err)
		return
	}
	s.srv.metrics.CancelResults.WithLabelValues(cancelForwarded).Inc()
	s.log.Debug("cancel request relayed", "backend_pid", req.ProcessID)
}

// startSession decodes the StartupMessage, dials upstream and forwards the
// packet unchanged.
func (s *clientConn) startSession(pkt []byte) error {
	version := binary.BigEndian.Uint32(pkt[4:8])
	if version>>16 != 3 {
		return &wire.ProtocolError{
			Code: codeFeatureNotSupported,
			Msg:  fmt.Sprintf("unsupported frontend protocol %d.%d: server supports 3.0 to 3.2", version>>16, version&0xffff),
		}
	}
	body := pkt[4:]
	if version != pgproto3.ProtocolVersion30 && version != pgproto3.ProtocolVersion32 {
		// A later 3.x minor version: decode the parameters as 3.0 and let the
		// server answer with NegotiateProtocolVersion.
		body = append([]byte(nil), body...)
		binary.BigEndian.PutUint32(body, pgproto3.ProtocolVersion30)
	}
	var msg pgproto3.StartupMessage
	if err := msg.Decode(body); err != nil {
		return &wire.ProtocolError{Code: codeProtocolViolation, Msg: "invalid startup packet layout"}
	}
	s.user = msg.Parameters["user"]
	s.database = msg.Parameters["database"]
	if s.database == "" {
		s.database = s.user
	}
	s.replication = isReplication(msg.Parameters["replication"])
	log := s.log.With("user", s.user, "database", s.database)
	s.mu.Lock()
	s.log = log
	s.mu.Unlock()
	if limit := s.rs.Load().maxClientConnections; limit > 0 && s.srv.active.Load() > int64(limit) {
		s.srv.metrics.Refused.Inc()
		return &wire.ProtocolError{Code: codeTooManyConnections,
			Msg: fmt.Sprintf("ttlproxy: too many client connections (max_client_connections is %d)", limit)}
	}

	if s.srv.pools != nil && !s.replication {
		return s.startPooled(version, msg.Parameters)
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.srv.cfg.DialTimeout)
	defer cancel()
	up, err := s.srv.dialer.Dial(ctx)
	if err != nil {
		s.srv.metrics.UpstreamErrors.Inc()
		s.log.Error("connecting to upstream", "err", err)
		return &wire.ProtocolError{Code: codeUnableToConnect, Msg: "ttlproxy: could not connect to the upstream server"}
	}
	if !s.link.server.attach(up) {
		_ = up.Close()
		return &wire.ProtocolError{Code: codeAdminShutdown, Msg: "terminating connection due to proxy shutdown"}
	}
	if _, err := up.Write(pkt); err != nil {
		s.srv.metrics.UpstreamErrors.Inc()
		s.log.Error("sending startup message upstream", "err", err)
		return &wire.ProtocolError{Code: codeConnectionFailure, Msg: "ttlproxy: lost the connection to the upstream server"}
	}
	return nil
}

// isReplication reports a walsender connection: replication=true/on/yes/1
// (physical) or database (logical).
func isReplication(v string) bool {
	switch strings.ToLower(v) {
	case "", "false", "off", "no", "0":
		return false
	}
	return true
}

// sendCancel delivers one CancelRequest packet to the upstream server.
func (srv *Server) sendCancel(pkt []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), srv.cfg.DialTimeout)
	defer cancel()
	conn, err := srv.dialer.Dial(ctx)
	if err != nil {
		srv.metrics.UpstreamErrors.Inc()
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(srv.cfg.DialTimeout))
	if _, err := conn.Write(pkt); err != nil {
		return fmt.Errorf("sending cancel request: %w", err)
	}
	// The server closes the connection once it has read the request;
	// waiting for that keeps the cancel ordered before our close.
	var b [1]byte
	_, _ = conn.Read(b[:])
	return nil
}
