// Package kubernetes holds the tests of Tidemark's Kubernetes manifests (base/,
// overlays/, components/), in a module of its own so that the Kubernetes API types
// and kustomize stay out of the binaries' dependencies.
//
// Without a cluster, the tests prove:
//
//   - every manifest decodes strictly into its Kubernetes API type (an unknown or
//     misspelt field fails), and every kustomization file into kustomize's;
//   - `kustomize build` of every overlay, with and without the TLS component,
//     succeeds (through the kustomize Go API), and its output decodes strictly too;
//   - every command, flag, environment variable and port the built manifests give a
//     master or a worker is one the binaries' `--help` lists, with a value of the
//     flag's type, and the probes, Services, scrape annotations, Secrets, memory
//     limits and grace periods agree with them.
package kubernetes
