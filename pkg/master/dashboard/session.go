package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Session settings.
const (
	// SessionCookie names the cookie that holds the session id.
	SessionCookie = "tidemark_session"
	// CSRFHeader carries the CSRF token of a POST sent by the page's script; a
	// form sends it as the csrf field.
	CSRFHeader = "X-CSRF-Token"
	csrfField  = "csrf"
	// DefaultSessionTTL is how long a login lasts.
	DefaultSessionTTL = 12 * time.Hour
	// maxSessions bounds the session table: a login beyond it evicts the session
	// closest to expiry, so logins in a loop cannot grow memory.
	maxSessions = 10000
)

// Errors of the login and of a POST.
var (
	// ErrBadCredential refuses a login whose token the master's guard rejects.
	ErrBadCredential = errors.New("the token is not valid")
	// ErrCSRF refuses a POST without the session's CSRF token.
	ErrCSRF = errors.New("missing or wrong CSRF token: reload the page and try again")
	// ErrCrossOrigin refuses a POST whose Origin is not this master.
	ErrCrossOrigin = errors.New("cross-origin request refused")
)

// session is one logged-in browser.
type session struct {
	csrf    string
	expires time.Time
}

// sessions is the table of live sessions. Sessions live in this replica's
// memory: a restart logs everyone out, and behind a load balancer a browser
// logs in to each replica it reaches.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[string]session
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, m: map[string]session{}}
}

// create starts a session and returns its id.
func (s *sessions) create() (string, session) {
	id, sess := randomToken(), session{csrf: randomToken(), expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.m) >= maxSessions {
		var oldest string
		for k, v := range s.m {
			if !v.expires.After(now) {
				delete(s.m, k)
				continue
			}
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, oldest)
		}
	}
	s.m[id] = sess
	return id, sess
}

// get returns the live session of id.
func (s *sessions) get(id string) (session, bool) {
	if id == "" {
		return session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[id]
	if !ok {
		return session{}, false
	}
	if !sess.expires.After(s.now()) {
		delete(s.m, id)
		return session{}, false
	}
	return sess, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionOf returns the request's live session.
func (d *Dashboard) sessionOf(r *http.Request) (string, session, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", session{}, false
	}
	sess, ok := d.sessions.get(c.Value)
	return c.Value, sess, ok
}

func (d *Dashboard) setCookie(w http.ResponseWriter, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    id,
		Path:     Root,
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   d.cfg.Secure,
		SameSite: http.SameSiteStrictMode,
	})
}

// credentialOK asks the master's guard whether token (with the request's TLS
// state: its client certificate under mutual TLS) is a credential it accepts.
// The guard's own check runs, so refusals are logged and counted like any other.
func (d *Dashboard) credentialOK(r *http.Request, token string) bool {
	if d.cfg.Guard == nil {
		return true
	}
	probe := r.Clone(r.Context())
	probe.Header = http.Header{}
	if token != "" {
		probe.Header.Set("Authorization", "Bearer "+token)
	}
	passed := false
	d.cfg.Guard.Require(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		passed = true
	})).ServeHTTP(&discardWriter{h: http.Header{}}, probe)
	return passed
}

// discardWriter takes the guard's refusal, which the login page words itself.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// requireSession serves next to a request with a live session. Without one, a
// page is redirected to the login form and anything else is answered 401. With
// authentication disabled a session is started on the first request, so the
// CSRF check still protects the buttons; so it is for a request whose verified
// client certificate alone satisfies the guard (mutual TLS without tokens).
func (d *Dashboard) requireSession(next func(w http.ResponseWriter, r *http.Request, s session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, sess, ok := d.sessionOf(r)
		if !ok && d.cfg.Guard == nil {
			var id string
			id, sess = d.sessions.create()
			d.setCookie(w, id, int(d.cfg.SessionTTL/time.Second))
			ok = true
		}
		if !ok && clientCertified(r) && d.credentialOK(r, "") {
			// Mutual TLS with no token configured: the verified certificate is
			// the credential, so there is nothing to type into a form.
			var id string
			id, sess = d.sessions.create()
			d.setCookie(w, id, int(d.cfg.SessionTTL/time.Second))
			ok = true
		}
		if !ok {
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, Root+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "log in first: "+Root+"login", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			if err := d.checkPost(r, sess); err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
		}
		next(w, r, sess)
	})
}

// clientCertified reports whether the request came with a client certificate
// that verified against the master's client CA.
func clientCertified(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}

// checkPost refuses a POST from another origin or without the session's CSRF
// token.
func (d *Dashboard) checkPost(r *http.Request, sess session) error {
	if err := sameOrigin(r); err != nil {
		return err
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
		return ErrCSRF
	}
	return nil
}

// sameOrigin refuses a request whose Origin header names another host. Browsers
// send Origin on every POST; a request without one (curl) is left to the CSRF
// token.
func sameOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return ErrCrossOrigin
	}
	return nil
}

// safeNext returns the page to go to after the login: a path of the dashboard,
// never another site ("//evil", "https://evil").
func safeNext(next string) string {
	if !strings.HasPrefix(next, Root) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Root
	}
	return next
}

// login serves the login form and takes its token.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if d.cfg.Guard == nil {
		http.Redirect(w, r, Root, http.StatusSeeOther)
		return
	}
	next := safeNext(r.FormValue("next"))
	if r.Method == http.MethodGet {
		d.render(w, r, http.StatusOK, "login", page{Title: "Log in", Next: next})
		return
	}
	if err := sameOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if !d.credentialOK(r, strings.TrimSpace(r.PostFormValue("token"))) {
		d.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Next: next, Error: ErrBadCredential.Error()})
		return
	}
	id, _ := d.sessions.create()
	d.setCookie(w, id, int(d.cfg.SessionTTL/time.Second))
	d.cfg.Logger.Info("dashboard login", "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, _ session) {
	if id, _, ok := d.sessionOf(r); ok {
		d.sessions.drop(id)
	}
	d.setCookie(w, "", -1)
	http.Redirect(w, r, Root+"login", http.StatusSeeOther)
}
