package control

// attach serves GET /v1/execs/{id}/attach (WebSocket; not built yet).
func (s *Server) attach(q *request, e *execProc) error {
	return fail("NOT_FOUND", "the WebSocket attach route is not built yet; read /v1/execs/{id}/output by offset")
}
