//go:build !chaos

package e2e

// chaosBuildTags is false outside chaos runs: build() compiles the binaries
// without the fault hook (internal/dev/chaos is then a no-op).
const chaosBuildTags = false
