package proxy

import (
	"time"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// finalWriteTimeout bounds writing a last message to a peer that may not be
// reading: an ErrorResponse to a client, a Terminate to a server.
const finalWriteTimeout = time.Second

// SQLSTATEs the proxy itself answers with.
const (
	codeProtocolViolation     = sqlstate.ProtocolViolation
	codeConnectionFailure     = sqlstate.ConnectionFailure
	codeUnableToConnect       = sqlstate.SQLClientUnableToEstablishSQLConnection
	codeProgramLimit          = sqlstate.ProgramLimitExceeded
	codeAdminShutdown         = sqlstate.AdminShutdown
	codeFeatureNotSupported   = sqlstate.FeatureNotSupported
	codeInternalError         = sqlstate.InternalError
	codeTooManyConnections    = sqlstate.TooManyConnections
	codeInsufficientResources = sqlstate.InsufficientResources
	codeQueryCanceled         = sqlstate.QueryCanceled
	codeIdleSessionTimeout    = sqlstate.IdleSessionTimeout
	codeIdleInTxTimeout       = sqlstate.IdleInTransactionSessionTimeout
	codeInvalidPassword       = sqlstate.InvalidPassword
	codeInvalidCatalogName    = sqlstate.InvalidCatalogName
)
