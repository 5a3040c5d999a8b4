package auth

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
)

// bodyProbe records whether anyone read the request body.
type bodyProbe struct{ read bool }

func (b *bodyProbe) Read(p []byte) (int, error) { b.read = true; return 0, io.EOF }

func tokenGuard(t *testing.T, reg prometheus.Registerer) *Guard {
	t.Helper()
	toks, err := NewTokens("test", tokA, tokB)
	if err != nil {
		t.Fatal(err)
	}
	return NewGuard(GuardConfig{Tokens: toks, Metrics: NewMetrics(reg)})
}

// A request without the right token is answered 401 in the JSON error shape with
// WWW-Authenticate, before the handler runs and without its body being read;
// either token of a rotation passes.
func TestRequireRefusesWrongOrMissingTokenBeforeTheHandlerReadsTheBody(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := tokenGuard(t, reg)
	ran := 0
	h := g.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran++
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	for _, tc := range []struct {
		name, header string
		want         int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong", "Bearer cccccccccccccccccccccccccccccccc", http.StatusUnauthorized},
		{"basic scheme", "Basic " + tokA, http.StatusUnauthorized},
		{"new token", "Bearer " + tokA, http.StatusNoContent},
		{"old token, lower-case scheme", "bearer " + tokB, http.StatusNoContent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := &bodyProbe{}
			r := httptest.NewRequest(http.MethodPost, "/api/v1/internal/merge-wal/demo", probe)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			before := ran
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d", w.Code, tc.want)
			}
			if tc.want != http.StatusUnauthorized {
				return
			}
			if ran != before || probe.read {
				t.Fatal("the handler ran or the body was read for a refused request")
			}
			if got := w.Header().Get("WWW-Authenticate"); got != `Bearer realm="tidemark"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
			var body httpjson.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != CodeUnauthenticated {
				t.Errorf("body %s (%v), want code %s", w.Body, err, CodeUnauthenticated)
			}
			if strings.Contains(w.Body.String(), tokA[:8]) || strings.Contains(w.Body.String(), "cccccccc") {
				t.Errorf("the answer echoes a token: %s", w.Body)
			}
		})
	}
	if n := testutil.ToFloat64(g.cfg.Metrics.Failures.WithLabelValues(SurfaceHTTP, ReasonMissingToken)); n != 2 {
		t.Errorf("missing-token failures counted %v, want 2 (none and Basic)", n)
	}
	if n := testutil.ToFloat64(g.cfg.Metrics.Failures.WithLabelValues(SurfaceHTTP, ReasonInvalidToken)); n != 1 {
		t.Errorf("invalid-token failures counted %v, want 1", n)
	}
}

func TestNilGuardAcceptsEverything(t *testing.T) {
	var g *Guard
	if NewGuard(GuardConfig{}) != nil {
		t.Fatal("a guard that requires nothing must be nil")
	}
	h := g.Require(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", nil))
	if w.Code != http.StatusNoContent || len(g.ServerOptions()) != 0 {
		t.Fatalf("nil guard: status %d, %d server options", w.Code, len(g.ServerOptions()))
	}
}

// grpcServer serves a WorkerService that implements nothing (an authorized call
// answers Unimplemented, a refused one Unauthenticated), health and reflection.
func grpcServer(t *testing.T, g *Guard, tlsCfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append(g.ServerOptions(), ServerCredentials(tlsCfg)...)...)
	tidemarkv1.RegisterWorkerServiceServer(gs, tidemarkv1.UnimplementedWorkerServiceServer{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

func dial(t *testing.T, addr, token string, tlsCfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, DialOptions(token, tlsCfg)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// reflect lists services through the reflection stream (a stream call).
func reflect(cc *grpc.ClientConn) error {
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(context.Background())
	if err != nil {
		return err
	}
	// A Send the server already refused ends in io.EOF; Recv has the status.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = stream.Recv()
	return err
}

// The gRPC interceptors: a protected call (unary, and the reflection stream)
// without the right token is Unauthenticated and never reaches the service;
// health needs nothing.
func TestGRPCRefusesCallsWithoutTheTokenExceptHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := tokenGuard(t, reg)
	addr := grpcServer(t, g, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name, token string
		want        codes.Code
	}{
		{"no token", "", codes.Unauthenticated},
		{"wrong token", "cccccccccccccccccccccccccccccccc", codes.Unauthenticated},
		{"token", tokB, codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := dial(t, addr, tc.token, nil)
			_, err := tidemarkv1.NewWorkerServiceClient(cc).MergeWal(ctx, &tidemarkv1.MergeWalRequest{Target: "demo"})
			if status.Code(err) != tc.want {
				t.Fatalf("MergeWal: %v, want %s", err, tc.want)
			}
			wantStream := tc.want
			if wantStream == codes.Unimplemented {
				wantStream = codes.OK
			}
			if err := reflect(cc); status.Code(err) != wantStream {
				t.Fatalf("reflection: %v, want %s", err, wantStream)
			}
			h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health = %v, %v; want SERVING without a credential", h, err)
			}
		})
	}
	if n := testutil.ToFloat64(g.cfg.Metrics.Failures.WithLabelValues(SurfaceGRPC, ReasonInvalidToken)); n != 2 {
		t.Errorf("grpc invalid-token failures %v, want 2 (unary and stream)", n)
	}
}

// With a client CA, a protected call needs a client certificate that verified
// against it (on gRPC and HTTP), while health is reached over TLS without one.
// A certificate of another CA fails the handshake.
func TestClientCARequiresAVerifiedClientCertificateOnProtectedCalls(t *testing.T) {
	certs := testcerts.New(t, t.TempDir())
	serverTLS, err := ServerTLS(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	g := NewGuard(GuardConfig{RequireClientCert: true, Metrics: NewMetrics(nil)})
	withCert, err := ClientTLS(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := ClientTLS(certs.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	other := testcerts.New(t, t.TempDir())
	foreign, err := ClientTLS(certs.CA, other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("grpc", func(t *testing.T) {
		addr := grpcServer(t, g, serverTLS)
		_, err := tidemarkv1.NewWorkerServiceClient(dial(t, addr, "", noCert)).Info(ctx, &tidemarkv1.InfoRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Info without a client certificate: %v, want Unauthenticated", err)
		}
		if h, err := healthpb.NewHealthClient(dial(t, addr, "", noCert)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health without a client certificate = %v, %v", h, err)
		}
		_, err = tidemarkv1.NewWorkerServiceClient(dial(t, addr, "", withCert)).Info(ctx, &tidemarkv1.InfoRequest{})
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("Info with the client certificate: %v, want it to reach the service (Unimplemented)", err)
		}
		_, err = tidemarkv1.NewWorkerServiceClient(dial(t, addr, "", foreign)).Info(ctx, &tidemarkv1.InfoRequest{})
		if code := status.Code(err); code != codes.Unavailable && code != codes.Unauthenticated {
			t.Fatalf("Info with another CA's certificate: %v, want the handshake refused", err)
		}
	})

	t.Run("http", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(g.Require(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		})))
		srv.TLS = serverTLS
		srv.StartTLS()
		defer srv.Close()
		get := func(cfg *tls.Config) (int, error) {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := c.Post(srv.URL+"/api/v1/internal/merge-wal/demo", "application/json", nil)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		if code, err := get(noCert); err != nil || code != http.StatusUnauthorized {
			t.Fatalf("without a client certificate: %d %v, want 401", code, err)
		}
		if code, err := get(withCert); err != nil || code != http.StatusNoContent {
			t.Fatalf("with the client certificate: %d %v, want 204", code, err)
		}
		if _, err := get(foreign); err == nil {
			t.Fatal("another CA's client certificate: the handshake succeeded")
		}
	})
	if n := testutil.ToFloat64(g.cfg.Metrics.Failures.WithLabelValues(SurfaceGRPC, ReasonNoClientCert)); n != 1 {
		t.Errorf("grpc no-client-cert failures %v, want 1", n)
	}
}

// The binaries refuse to serve with no credential unless told to, and refuse
// contradictory settings, naming the flags.
func TestServerSettingsRefuseNoCredentialUnlessDisabled(t *testing.T) {
	certs := testcerts.New(t, t.TempDir())
	for _, tc := range []struct {
		name    string
		f       Flags
		wantErr string
		guard   bool
	}{
		{"nothing", Flags{}, "AUTH_DISABLED", false},
		{"disabled", Flags{Disabled: true}, "", false},
		{"token", Flags{Token: tokA}, "", true},
		{"short token", Flags{Token: "abc"}, "AUTH_TOKEN", false},
		{"both token sources", Flags{Token: tokA, TokenFile: "/x"}, "AUTH_TOKEN_FILE", false},
		{"disabled with token", Flags{Token: tokA, Disabled: true}, "AUTH_DISABLED", false},
		{"client CA without TLS", Flags{ClientCA: certs.CA}, "TLS_CERT", false},
		{"cert without key", Flags{Token: tokA, CertFile: certs.ServerCert}, "TLS_KEY", false},
		{"mTLS", Flags{ClientCA: certs.CA, CertFile: certs.ServerCert, KeyFile: certs.ServerKey}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.f.Server(nil, prometheus.NewRegistry())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (s.Guard != nil) != tc.guard {
				t.Fatalf("guard %v, want guard: %v", s.Guard, tc.guard)
			}
		})
	}
}
