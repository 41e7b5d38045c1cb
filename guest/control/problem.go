package control

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// codeStatus maps every stable code this service answers with to its HTTP
// status: the same pairs as ERROR_STATUS in src/protocol/errors.ts.
var codeStatus = map[string]int{
	"CONTROL_UNAUTHORIZED": 401,
	"GUEST_NOT_READY":      503,
	"PATH_ESCAPE":          403,
	"TOO_LARGE":            413,
	"EXEC_NOT_FOUND":       404,
	"FILE_NOT_FOUND":       404,
	"FILE_EXISTS":          409,
	"FILE_TYPE_MISMATCH":   409,
	"CHECKSUM_MISMATCH":    422,
	"OFFSET_MISMATCH":      409,
	"OUTPUT_TRUNCATED":     410,
	"EXEC_START_FAILED":    422,
	"EXEC_STATE_CONFLICT":  409,
	"LOG_OFFSET_PAST_END":  416,
	"VALIDATION_FAILED":    400,
	"MALFORMED_JSON":       400,
	"NOT_FOUND":            404,
	"METHOD_NOT_ALLOWED":   405,
	"INTERNAL":             500,
	"CONCURRENCY_LIMITED":  429,
}

// Error is a refusal with a stable code (see codeStatus), answered as an RFC
// 9457 problem body of the shape src/protocol/problem.ts parses.
type Error struct {
	Code   string
	Detail string
	Extra  map[string]interface{}
}

// Error returns "CODE: detail".
func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// Status is the HTTP status of the error's code (500 for a code not in codeStatus).
func (e *Error) Status() int {
	if s, ok := codeStatus[e.Code]; ok {
		return s
	}
	return 500
}

// fail builds an *Error with a formatted detail.
func fail(code string, format string, args ...interface{}) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// writeProblem answers err (an *Error, else INTERNAL) as application/problem+json.
func writeProblem(w http.ResponseWriter, err error) {
	e, ok := err.(*Error)
	if !ok {
		e = &Error{Code: "INTERNAL", Detail: err.Error()}
	}
	body := map[string]interface{}{
		"type":   "https://beachball.dev/problems/" + strings.ReplaceAll(strings.ToLower(e.Code), "_", "-"),
		"title":  e.Code,
		"status": e.Status(),
		"code":   e.Code,
		"detail": e.Detail,
	}
	if e.Extra != nil {
		body["extra"] = e.Extra
	}
	h := w.Header()
	h.Set("content-type", "application/problem+json")
	if e.Status() == 401 {
		h.Set("www-authenticate", `Bearer realm="beachball"`)
	}
	w.WriteHeader(e.Status())
	_ = json.NewEncoder(w).Encode(body)
}

// writeJSON answers v as application/json with status.
func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
