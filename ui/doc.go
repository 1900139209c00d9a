// Package ui is converge's dashboard for people on call: server-rendered
// pages under /ui, usable without JavaScript.
//
// A user signs in with an API token (viewer or operator); the dashboard
// keeps a server-side session in PostgreSQL and a cookie (HttpOnly,
// SameSite=Strict, Secure behind TLS) that names it. Viewers see
// everything and get no action controls; operators redrive, discard and
// cancel through the same store functions as the API, so every action is
// audited. Every state-changing request is checked twice against cross-site
// requests: http.CrossOriginProtection (Sec-Fetch-Site / Origin) and a
// per-session form token.
//
// One small handler per file; templates are parsed once at start from an
// embed.FS and rendered into a buffer before anything is written; forms
// follow Post/Redirect/Get, carrying results to the next page as a
// session flash.
package ui
