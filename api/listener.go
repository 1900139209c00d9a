package api

import (
	"bytes"
	"fmt"
	"net"
	"strconv"

	"github.com/converge-run/converge"
)

// rawHeadersTooLarge is how net/http's own answer begins when a request's
// headers are over the http.Server's MaxHeaderBytes (ServerMaxHeaderBytes):
// it writes it on the connection itself, before any handler runs, as plain
// text.
var rawHeadersTooLarge = []byte("HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n")

// rawUnsupportedTE is net/http's own answer to a request with a transfer
// coding it does not know (Transfer-Encoding: gzip): a plain 501, a 5xx
// for bad input.
var rawUnsupportedTE = []byte("HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nUnsupported transfer encoding")

// badTransferEncoding is what a client gets instead of rawUnsupportedTE:
// net/http's plain 400 for a request it cannot parse, naming why.
var badTransferEncoding = []byte("HTTP/1.1 400 Bad Request: unsupported transfer encoding\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: unsupported transfer encoding")

// ProblemListener wraps ln so that the answers net/http writes by itself,
// before any handler, keep SPEC §4 and G9 (every error is a problem body;
// only a request net/http cannot parse at all may get its plain 400; bad
// input is never a 5xx): its 431 to a request whose headers are far over
// the limit (over the http.Server's MaxHeaderBytes, which it will not
// read) is the problem body headers-too-large with an X-Request-Id, as
// LimitHeaders answers to one over MaxHeaderBytes, and its 501 to a
// transfer coding it does not know is its plain 400 for a request it
// cannot parse. Every other byte passes through untouched.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return problemConn{c}, nil
}

// problemConn replaces net/http's plain 431 and 501. net/http writes those
// answers in one Write straight on the connection (a handler's answer goes
// through its buffered writer and carries our own headers), so the prefix
// identifies them.
type problemConn struct{ net.Conn }

// CloseWrite half-closes the connection when it can (a TCP one), as
// net/http does after an answer it wrote before reading the whole request
// (its 431), so that the client reads the answer rather than a reset.
func (c problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c problemConn) Write(b []byte) (int, error) {
	var answer []byte
	switch {
	case bytes.HasPrefix(b, rawHeadersTooLarge):
		answer = headersTooLargeAnswer()
	case bytes.Equal(b, rawUnsupportedTE):
		answer = badTransferEncoding
	default:
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(b), nil
}

// headersTooLargeAnswer is the whole HTTP answer 431 headers-too-large
// with a fresh request id: the request's own was never read.
func headersTooLargeAnswer() []byte {
	p := NewProblem(converge.Errorf(eHeadersTooLarge, "the request headers are over the limit of %d bytes", MaxHeaderBytes))
	p.RequestID = newRequestID()
	var body bytes.Buffer
	_ = encodeJSON(&body, p)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d Request Header Fields Too Large\r\n", p.Status)
	b.WriteString("Content-Type: application/problem+json\r\nX-Content-Type-Options: nosniff\r\n")
	b.WriteString("X-Request-Id: " + p.RequestID + "\r\nConnection: close\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(body.Len()) + "\r\n\r\n")
	b.Write(body.Bytes())
	return b.Bytes()
}
