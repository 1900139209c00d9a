// Package deploycheck checks the deployment files without a container engine or a
// cluster: docker-compose.yml (with the Compose Specification loader), .env.example,
// deploy/Dockerfile and .dockerignore (with BuildKit's parser and Docker's ignore
// rules), and the Kubernetes base in deploy/k8s (built with kustomize and decoded
// strictly into the typed Kubernetes API objects).
//
// It is a module of its own (test/deploycheck/go.mod, with a replace directive
// back to the repository root for the config package), so that BuildKit,
// compose-go, kustomize and the Kubernetes API stay out of the product's go.mod;
// a test checks that they do. `make test` and `make lint` run it with the root
// module.
//
// It has only tests. Each check returns the problems it finds, so that the tests can
// show, on deliberately broken copies of the files, that every check can fail.
package deploycheck
