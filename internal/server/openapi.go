package server

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the API's OpenAPI 3 document; a test checks that it
// describes exactly the routes the server serves.
//
//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request, _ *call) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}
