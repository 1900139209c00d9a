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

// ProblemListener wraps ln so that the 431 net/http answers by itself to a
// request whose headers are far over the limit (over the http.Server's
// MaxHeaderBytes, which it will not read) is the problem body
// headers-too-large, with an X-Request-Id, as LimitHeaders answers to one
// over MaxHeaderBytes (SPEC §4: every error is a problem body; only a
// request net/http cannot parse at all may get its plain 400). Every other
// byte passes through untouched.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return problemConn{c}, nil
}

// problemConn replaces net/http's plain 431 with the problem body. net/http
// writes that answer in one Write straight on the connection (a handler's
// answer goes through its buffered writer and carries our own headers), so
// the prefix identifies it.
type problemConn struct{ net.Conn }

func (c problemConn) Write(b []byte) (int, error) {
	if !bytes.HasPrefix(b, rawHeadersTooLarge) {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(headersTooLargeAnswer()); err != nil {
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
