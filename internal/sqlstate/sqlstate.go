// Package sqlstate names the SQLSTATE codes ttlproxy answers with, as
// PostgreSQL's src/backend/utils/errcodes.txt names them. The rewriter's
// rejections and the proxy's own ErrorResponses use these constants, so a
// code is spelled in one place.
package sqlstate

const (
	// Class 08: connection exception.
	SQLClientUnableToEstablishSQLConnection = "08001"
	ConnectionFailure                       = "08006"
	ProtocolViolation                       = "08P01"

	// Class 0A: feature not supported. A statement on a TTL table the
	// proxy cannot make safe.
	FeatureNotSupported = "0A000"

	// Class 22: data exception.
	InvalidParameterValue     = "22023"
	InvalidTextRepresentation = "22P02"

	// Class 42: syntax error or access rule violation.
	SyntaxError = "42601"

	// Class 53: insufficient resources.
	TooManyConnections = "53300"

	// Class 54: program limit exceeded.
	ProgramLimitExceeded = "54000"
	StatementTooComplex  = "54001"

	// Class 57: operator intervention.
	QueryCanceled      = "57014"
	AdminShutdown      = "57P01"
	IdleSessionTimeout = "57P05"

	// Class XX: internal error.
	InternalError = "XX000"
)
