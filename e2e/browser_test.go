package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// chromiumEnv names the browser binary the browser tests drive (default: the
// first of chromium, chromium-browser, google-chrome in PATH).
const chromiumEnv = "TIDEMARK_CHROMIUM"

// chromiumPath finds headless Chromium. Missing, the test skips locally and fails
// under CI=true: CI installs Debian's chromium package (.ci/run), and must not
// skip the browser tests.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("chromium not found, but CI is set: install it (apt-get install chromium) or set %s; CI must not skip the browser tests", chromiumEnv)
	}
	t.Skipf("chromium not found: apt-get install chromium (or set %s) to run the browser tests", chromiumEnv)
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile for t and returns a
// context of its first tab; both end when t does. The background-networking
// flags matter: without them Chromium hangs on a network without the internet.
func newBrowser(t *testing.T, width, height int) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
