// Wrapper module: builds github.com/zegl/kube-score/cmd/kube-score at v1.20.0 from the Go module proxy with the
// dependency versions pinned below (go.sum is committed). Bump the version here and run 'go mod tidy' in this
// directory; e2e/build-binaries reads the version from this file.
module inference-backend.local/e2e/kube-score

go 1.26.0

require github.com/zegl/kube-score v1.20.0 // indirect
