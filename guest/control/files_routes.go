package control

import "net/http"

// routeFiles serves /v1/files/{op} (docs/exec-and-files.md): each path is confined first.
func (s *Server) routeFiles(q *request, op, m string) error {
	pathArg := func() (confined, error) { return confine(s.cfg.Roots, q.r.URL.Query().Get("path")) }
	switch {
	case op == "stat" && m == http.MethodGet:
		c, err := pathArg()
		if err != nil {
			return err
		}
		st, err := statPath(c)
		if err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, st)
		return nil
	case op == "list" && m == http.MethodGet:
		c, err := pathArg()
		if err != nil {
			return err
		}
		entries, truncated, err := listDir(c)
		if err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, map[string]interface{}{"path": c.path, "entries": entries, "truncated": truncated})
		return nil
	case op == "content" && (m == http.MethodGet || m == http.MethodHead):
		c, err := pathArg()
		if err != nil {
			return err
		}
		return serveFile(q, c)
	case op == "content" && m == http.MethodPut:
		c, err := pathArg()
		if err != nil {
			return err
		}
		st, err := writeUpload(q, c)
		if err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, st)
		return nil
	case op == "upload" && m == http.MethodGet:
		c, err := pathArg()
		if err != nil {
			return err
		}
		st, err := uploadState(c)
		if err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, st)
		return nil
	case op == "sha256" && m == http.MethodGet:
		c, err := pathArg()
		if err != nil {
			return err
		}
		sum, err := fileSha256(c)
		if err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, sum)
		return nil
	case op == "mkdir" && m == http.MethodPost:
		var b struct {
			Path    string `json:"path"`
			Parents bool   `json:"parents"`
		}
		if err := readJSON(q, &b); err != nil {
			return err
		}
		c, err := confine(s.cfg.Roots, b.Path)
		if err != nil {
			return err
		}
		if err := mkdirPath(c, b.Parents); err != nil {
			return err
		}
		return answerStat(q, c)
	case op == "move" && m == http.MethodPost:
		var b struct {
			From      string `json:"from"`
			To        string `json:"to"`
			Overwrite bool   `json:"overwrite"`
		}
		if err := readJSON(q, &b); err != nil {
			return err
		}
		from, err := confine(s.cfg.Roots, b.From)
		if err != nil {
			return err
		}
		to, err := confine(s.cfg.Roots, b.To)
		if err != nil {
			return err
		}
		if err := movePath(from, to, b.Overwrite); err != nil {
			return err
		}
		return answerStat(q, to)
	case op == "remove" && m == http.MethodPost:
		var b struct {
			Path      string `json:"path"`
			Recursive bool   `json:"recursive"`
		}
		if err := readJSON(q, &b); err != nil {
			return err
		}
		c, err := confine(s.cfg.Roots, b.Path)
		if err != nil {
			return err
		}
		if err := removePath(c, b.Recursive); err != nil {
			return err
		}
		q.w.WriteHeader(http.StatusNoContent)
		return nil
	case op == "tar" && m == http.MethodGet:
		c, err := pathArg()
		if err != nil {
			return err
		}
		return writeTar(q, c)
	case op == "tar" && m == http.MethodPut:
		c, err := pathArg()
		if err != nil {
			return err
		}
		res, err := extractTar(q, c)
		if err != nil {
			return err
		}
		writeJSON(q.w, http.StatusOK, res)
		return nil
	}
	return fail("NOT_FOUND", "no route %s %s", m, q.r.URL.Path)
}

func answerStat(q *request, c confined) error {
	st, err := statPath(c)
	if err != nil {
		return err
	}
	writeJSON(q.w, http.StatusOK, st)
	return nil
}
