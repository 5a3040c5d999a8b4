//go:build !chaos

package e2e

// chaosBuildTags is false outside chaos runs: build() compiles the binaries
// without the fault hook (tools/chaos is then a no-op).
const chaosBuildTags = false
