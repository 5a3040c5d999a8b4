package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds a call (a long poll gets its wait on top).
	DefaultTimeout = 30 * time.Second
	// DefaultMaxAnswer bounds the bytes of one answer a call holds.
	DefaultMaxAnswer = 64 << 20
	// maxErrorBytes bounds an error answer read into an *Error.
	maxErrorBytes = 64 << 10
)

// Client calls one worker's data API. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	http      *http.Client
	token     string
	tls       *tls.Config
	timeout   time.Duration
	maxAnswer int64
	// arrowCompression is the IPC buffer compression Arrow reads ask for.
	arrowCompression string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends the requests with hc (default: a client of its own over
// a clone of http.DefaultTransport). Its Timeout, if set, bounds calls too.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithToken sends token as "Authorization: Bearer <token>" on every request
// (nothing when empty).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithTLS uses cfg (a client certificate, a CA) for https; it applies to the
// client's own transport, not to one given by WithHTTPClient.
func WithTLS(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// WithTimeout bounds every call by d (DefaultTimeout when d is 0; no bound but
// the context's when d is negative).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithMaxAnswer bounds the bytes of one answer a call holds (DefaultMaxAnswer
// when n <= 0).
func WithMaxAnswer(n int64) Option { return func(c *Client) { c.maxAnswer = n } }

// WithArrowCompression asks for Arrow answers whose IPC buffers are compressed
// with codec, "zstd" or "lz4" (default: none); the worker refuses another with
// ErrInvalidRequest.
func WithArrowCompression(codec string) Option { return func(c *Client) { c.arrowCompression = codec } }

// New returns a client of the worker at baseURL: "http://host:port", or
// "host:port" (http, or https with WithTLS).
func New(baseURL string, opts ...Option) (*Client, error) {
	c := &Client{}
	for _, o := range opts {
		o(c)
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	if c.maxAnswer <= 0 {
		c.maxAnswer = DefaultMaxAnswer
	}
	raw := strings.TrimRight(baseURL, "/")
	if !strings.Contains(raw, "://") {
		scheme := "http://"
		if c.tls != nil {
			scheme = "https://"
		}
		raw = scheme + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: worker URL %q: want http://host:port", baseURL)
	}
	c.base = u
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = c.tls
		c.http = &http.Client{Transport: tr}
	}
	return c, nil
}

// URL is the worker's base URL, as New parsed it.
func (c *Client) URL() string { return c.base.String() }

// request is one call: its route (path and query), body and headers.
type request struct {
	method string
	path   string // from routes.go
	query  url.Values
	body   any // JSON-encoded; nil: no body
	header http.Header
	// wait is a long poll's wait, allowed on top of the timeout.
	wait time.Duration
	// raw is a body sent as it is, labelled contentType (when body is nil).
	raw         io.Reader
	contentType string
}

// send makes the call and decodes a 2xx answer into v (if not nil); it returns
// the answer's header.
func (c *Client) send(ctx context.Context, r request, v any) (http.Header, error) {
	resp, err := c.sendStatus(ctx, r, v)
	if err != nil {
		return nil, err
	}
	return resp.Header, nil
}

// sendStatus is send for a call whose 2xx statuses differ in meaning: it
// returns the answer (its body read and closed).
func (c *Client) sendStatus(ctx context.Context, r request, v any) (*http.Response, error) {
	resp, cancel, err := c.open(ctx, r)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", r.method, r.path, err)
	}
	if int64(len(body)) > c.maxAnswer {
		return nil, fmt.Errorf("%s %s: %w: over %d bytes", r.method, r.path, ErrTooLarge, c.maxAnswer)
	}
	if v != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(body, v); err != nil {
			return nil, fmt.Errorf("%s %s: %w: %v", r.method, r.path, ErrUndecodable, err)
		}
	}
	return resp, nil
}

// open makes the call and returns a 2xx answer with its body unread, and the
// cancel of the call's bound, to call once the body is read. Another answer is
// an *Error.
func (c *Client) open(ctx context.Context, r request) (*http.Response, context.CancelFunc, error) {
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout+r.wait)
	}
	var rd io.Reader
	if r.body != nil {
		raw, err := json.Marshal(r.body)
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("%s %s: body: %w", r.method, r.path, err)
		}
		rd = bytes.NewReader(raw)
	} else if r.raw != nil {
		rd = r.raw
	}
	target := strings.TrimRight(c.base.String(), "/") + r.path // r.path is escaped
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	switch {
	case r.raw != nil && r.body == nil:
		req.Header.Set("Content-Type", r.contentType)
	case rd != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		return nil, nil, err // *url.Error names the method and URL
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer cancel()
		defer resp.Body.Close()
		return nil, nil, fmt.Errorf("%s %s: %w", r.method, r.path, answerError(resp))
	}
	return resp, cancel, nil
}

// answerError reads an error answer.
func answerError(resp *http.Response) *Error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
	} else {
		e.Message = strings.TrimSpace(string(raw))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	e.BackpressureDelay = backpressureDelay(resp.Header)
	return e
}

// cancelOnClose ends a call's bound when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// errKind refuses a kind that is neither Rollouts nor Generic.
var errKind = errors.New("client: store kind: want rollouts or generic")

// backpressureDelay is the X-Tidemark-Backpressure-Delay of an add's answer.
func backpressureDelay(h http.Header) time.Duration {
	ms, err := strconv.ParseInt(h.Get(httpjson.BackpressureHeader), 10, 64)
	if err != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
