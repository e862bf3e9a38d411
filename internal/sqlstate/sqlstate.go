// Package sqlstate names the SQLSTATE codes ttlproxy answers with or
// branches on. The codes come from jackc/pgerrcode, which generates them
// from PostgreSQL's src/backend/utils/errcodes.txt under the same names, so
// no code is spelled in this project: the rewriter's rejections, the proxy's
// own ErrorResponses and the sweeper's error checks use these constants.
package sqlstate

import "github.com/jackc/pgerrcode"

// Class 08: connection exception.
const (
	SQLClientUnableToEstablishSQLConnection = pgerrcode.SQLClientUnableToEstablishSQLConnection
	ConnectionFailure                       = pgerrcode.ConnectionFailure
	ProtocolViolation                       = pgerrcode.ProtocolViolation
)

// Class 0A: feature not supported. A statement on a TTL table the proxy
// cannot make safe.
const FeatureNotSupported = pgerrcode.FeatureNotSupported

// Class 22: data exception.
const (
	InvalidParameterValue     = pgerrcode.InvalidParameterValue
	InvalidTextRepresentation = pgerrcode.InvalidTextRepresentation
)

// Class 23: integrity constraint violation.
const UniqueViolation = pgerrcode.UniqueViolation

// Class 28: invalid authorization specification. The proxy's own client
// authentication answers a wrong password, an unknown user and a missing
// password alike with InvalidPassword, as PostgreSQL does.
const (
	InvalidAuthorizationSpecification = pgerrcode.InvalidAuthorizationSpecification
	InvalidPassword                   = pgerrcode.InvalidPassword
)

// Class 3D: invalid catalog name. A server login refused with it (the
// database does not exist) will not heal by itself.
const InvalidCatalogName = pgerrcode.InvalidCatalogName

// Class 42: syntax error or access rule violation. InsufficientPrivilege:
// a statement through the proxy names a relation the proxy keeps to itself
// (a sidecar registry) or would rename or reshape one the rules depend on.
const (
	SyntaxError           = pgerrcode.SyntaxError
	InsufficientPrivilege = pgerrcode.InsufficientPrivilege
)

// Class 53: insufficient resources.
const TooManyConnections = pgerrcode.TooManyConnections

// InsufficientResources is 53000: a pooled client may not pin another server
// connection (max_pinned_connections).
const InsufficientResources = pgerrcode.InsufficientResources

// Class 54: program limit exceeded.
const (
	ProgramLimitExceeded = pgerrcode.ProgramLimitExceeded
	StatementTooComplex  = pgerrcode.StatementTooComplex
)

// Class 55: object not in prerequisite state. ObjectNotInPrerequisiteState:
// a TTL table lacks the row-level security row_security required asks for.
const (
	ObjectNotInPrerequisiteState = pgerrcode.ObjectNotInPrerequisiteState
	ObjectInUse                  = pgerrcode.ObjectInUse
	LockNotAvailable             = pgerrcode.LockNotAvailable
)

// Class 25: invalid transaction state.
const IdleInTransactionSessionTimeout = pgerrcode.IdleInTransactionSessionTimeout

// Class 57: operator intervention.
const (
	QueryCanceled      = pgerrcode.QueryCanceled
	AdminShutdown      = pgerrcode.AdminShutdown
	IdleSessionTimeout = pgerrcode.IdleSessionTimeout
)

// Class XX: internal error.
const InternalError = pgerrcode.InternalError
