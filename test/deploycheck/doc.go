// Package deploycheck checks the deployment files without a container engine or a
// cluster: docker-compose.yml (with the Compose Specification loader), .env.example,
// deploy/Dockerfile and .dockerignore (with BuildKit's parser and Docker's ignore
// rules), and the Kubernetes base in deploy/k8s (built with kustomize and decoded
// strictly into the typed Kubernetes API objects).
//
// It has only tests. Each check returns the problems it finds, so that the tests can
// show, on deliberately broken copies of the files, that every check can fail.
package deploycheck
