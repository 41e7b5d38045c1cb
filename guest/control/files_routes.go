package control

// routeFiles serves /v1/files/{op} (files.go).
func (s *Server) routeFiles(q *request, op, m string) error {
	return fail("NOT_FOUND", "no route %s %s", m, q.r.URL.Path)
}
