// Package apicheck holds the document and the server to each other: it runs
// the real converge binary, sends it every operation of its OpenAPI
// document (as operator, viewer, submitter and without a token, with good
// and hostile input) and validates every response with an independent
// OpenAPI implementation (kin-openapi's openapi3filter). It is a module of
// its own so that kin-openapi stays out of the product's go.mod.
package apicheck
