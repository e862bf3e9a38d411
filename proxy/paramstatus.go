package proxy

import (
	"bytes"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
)

// reportedParams is, in transaction mode, the ParameterStatus values a
// client has been sent (docs/design/pooling.md §2): those of its welcome,
// then every one relayed since. A server's ParameterStatus reaches the
// client only when it changes the client's view. Those among the answers
// to the proxy's own statements (the reset and apply on a server the
// client moves to, the settings' read-back) are held until the last of
// them is read and then only the final values that differ are sent, so a
// driver never sees a value that is not its session's, even for a moment
// (a reset's TimeZone of the login between two of the client's own).
//
// It is used by whichever pump writes to the client (the client's at its
// welcome, then the pump of the server it holds), one at a time: the
// hand-over of a server orders them, so it needs no lock.
type reportedParams struct {
	values map[string]string
	// held: reports among the proxy's own answers not yet released, in
	// arrival order.
	held []upstream.ParamStatus
}

func newReportedParams(params []upstream.ParamStatus) *reportedParams {
	v := make(map[string]string, len(params))
	for _, p := range params {
		v[p.Name] = p.Value
	}
	return &reportedParams{values: v}
}

// parseParamStatus splits a ParameterStatus body (name and value, each
// NUL-terminated); ok is false when it does not parse.
func parseParamStatus(body []byte) (name, value []byte, ok bool) {
	i := bytes.IndexByte(body, 0)
	if i < 0 {
		return nil, nil, false
	}
	j := bytes.IndexByte(body[i+1:], 0)
	if j < 0 {
		return nil, nil, false
	}
	return body[:i], body[i+1 : i+1+j], true
}

// pass reports whether the ParameterStatus of body, relayed among the
// client's own answers, changes the client's view, and records it when it
// does. A body that does not parse is passed on: the client decides.
func (rp *reportedParams) pass(body []byte) bool {
	if rp == nil {
		return true
	}
	name, value, ok := parseParamStatus(body)
	if !ok {
		return true
	}
	if old, ok := rp.values[string(name)]; ok && old == string(value) {
		return false
	}
	rp.values[string(name)] = string(value)
	return true
}

// hold keeps the ParameterStatus of body, read among the answers to the
// proxy's own statements, for release. False in session mode (rp nil):
// the report is the client's, relayed at once.
func (rp *reportedParams) hold(body []byte) bool {
	if rp == nil {
		return false
	}
	if name, value, ok := parseParamStatus(body); ok {
		rp.held = append(rp.held, upstream.ParamStatus{Name: string(name), Value: string(value)})
	}
	return true
}

// release writes to w, once the proxy's own answers are read, a
// ParameterStatus for each held report whose final value differs from
// what the client was told, and records it. Errors are w's.
func (rp *reportedParams) release(w *wire.Writer) error {
	if rp == nil || len(rp.held) == 0 {
		return nil
	}
	final := make(map[string]string, len(rp.held))
	var order []string
	for _, p := range rp.held {
		if _, seen := final[p.Name]; !seen {
			order = append(order, p.Name)
		}
		final[p.Name] = p.Value
	}
	rp.held = rp.held[:0]
	for _, name := range order {
		v := final[name]
		if old, ok := rp.values[name]; ok && old == v {
			continue
		}
		rp.values[name] = v
		b, _ := (&pgproto3.ParameterStatus{Name: name, Value: v}).Encode(nil)
		if _, err := w.Write(b); err != nil {
			return &wire.WriteError{Err: err}
		}
	}
	return nil
}
