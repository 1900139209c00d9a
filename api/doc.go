// Package api is converge's HTTP edge: the chi router, JSON handlers for
// /v1, token authentication with roles, RFC 9457 problem bodies, and the
// operational endpoints (/healthz, /readyz, /metrics, /openapi.json). HTTP
// status codes appear only here.
package api
