#!/usr/bin/env bash
# build-control-plane.sh - from nothing to a standalone CRD API server + etcd, using only
# Debian's package archive (sid suite, through a PRIVATE apt configuration; nothing is
# installed system-wide) and no Go module proxy.
#
#   bin/crd-apiserver : k8s.io/apiextensions-apiserver (the CRD server that is embedded in
#                       kube-apiserver), built from Debian's golang-k8s-*-dev source packages
#                       in GOPATH mode with a small standalone main (embedded below)
#   bin/etcd          : Debian sid etcd-server (3.5.x), unpacked from the .deb
#   bin/kubectl       : Debian sid kubectl, the same Kubernetes release as the server
#   bin/apiextensions-apiserver : (only with BUILD_UPSTREAM=1) the unmodified upstream main
#
# Usage: CP_DIR=$HOME/.cache/quartermaster/controlplane ./build-control-plane.sh
# Owned by Quartermaster (it began as a copy of a control-plane build kit); testenv runs it once
# and shows the lines marked "[build +<seconds>s]" as progress.
# Needs: Debian 12 or Ubuntu with apt-get, dpkg, debian-archive-keyring; root or not (the apt
#        configuration, lists and downloads are private, under $CP_DIR/work); no system changes.
#        About 300 MB downloaded, ~1.3 GB RAM, 3 to 10 minutes on 2 cores (3 when idle; the
#        Go build is most of it). Disk: up to 3.9 GB while building (unpacked Go sources and
#        the Go build cache); afterwards only bin/, manifest.txt and build.log stay (180 MB).
#        KEEP_WORK=1 keeps $CP_DIR/work (the sources and the Go build cache, for a ~5 s
#        rebuild).
set -euo pipefail

CP_DIR=${CP_DIR:-$(cd "$(dirname "$0")" && pwd)}
WORK=$CP_DIR/work
BIN=$CP_DIR/bin
SUITE=${SUITE:-sid}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$WORK/lists/partial" "$WORK/apt-cache/archives/partial" "$WORK/debs" "$BIN"
chmod 777 "$WORK/debs"   # apt's _apt sandbox user writes downloads here

log() { echo "[build +${SECONDS}s] $*"; }
PROGRESS_EVERY=${PROGRESS_EVERY:-10}

# progress LABEL TOTAL KIND: copy apt's or Go's own output from stdin (for the log) and, every
# $PROGRESS_EVERY seconds, show how many of TOTAL items are done and the latest one. KIND "apt"
# counts apt's "Get:" lines (the package is the fifth word); "line" counts every line.
progress() {
  local label=$1 total=$2 kind=$3 n=0 last=$SECONDS line item
  while IFS= read -r line; do
    printf '    %s\n' "$line"
    if [ "$kind" = apt ]; then
      [[ $line == Get:* ]] || continue
      read -r _ _ _ _ item _ <<<"$line"
    else
      item=$line
    fi
    n=$((n + 1))
    if (( SECONDS - last >= PROGRESS_EVERY )); then
      log "$label: $n of $total ($item)"
      last=$SECONDS
    fi
  done
}

# ---------------------------------------------------------------- private apt config
cat > "$WORK/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main
EOF
APT_OPTS=(-o "Dir::Etc::SourceList=$WORK/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$WORK/lists" -o "Dir::Cache=$WORK/apt-cache"
          -o "Dir::State::status=/dev/null" -o APT::Architecture=amd64 -o Debug::NoLocking=1
          -o Acquire::Languages=none)
# As root, apt would hand downloads to its _apt user, which cannot write here.
if [ "$(id -u)" = 0 ]; then APT_OPTS+=(-o APT::Sandbox::User=root); fi
log "step 1/5: package lists of Debian $SUITE from $MIRROR (private apt configuration)"
apt-get "${APT_OPTS[@]}" update -qq

# ---------------------------------------------------------------- dependency closure
ROOTS="golang-k8s-apiextensions-apiserver-dev golang-go"
log "step 2/5: resolving what to download: $ROOTS and everything they depend on"
apt-cache "${APT_OPTS[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances --no-pre-depends $ROOTS 2>/dev/null \
  | grep -v '^ ' | grep -v '^<' | sort -u \
  | grep -E '^golang-.*-dev$|^golang-1\.[0-9]+-(go|src)$' > "$WORK/closure.txt"
printf '%s\n' etcd-server kubectl >> "$WORK/closure.txt"
npkg=$(wc -l < "$WORK/closure.txt")
log "$npkg packages: Go $(sed -n 's/^golang-\(1\.[0-9]*\)-go$/\1/p' "$WORK/closure.txt" | sort -V | tail -1), the Kubernetes sources and their Go dependencies, etcd-server, kubectl"
apt-cache "${APT_OPTS[@]}" show --no-all-versions $(cat "$WORK/closure.txt") 2>/dev/null \
  | awk '/^Package:/{p=$2} /^Version:/{print p"="$2}' > "$CP_DIR/manifest.txt"

# ---------------------------------------------------------------- download + unpack
log "step 3/5: downloading $npkg .debs into $WORK/debs"
t0=$SECONDS
( cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" -q download $(cat "$WORK/closure.txt") ) 2>&1 \
  | progress downloaded "$npkg packages" apt
log "downloaded $(ls "$WORK"/debs/*.deb | wc -l) packages, $(du -sh "$WORK/debs" | cut -f1), in $(( SECONDS - t0 ))s"
log "step 4/5: unpacking them (dpkg -x) into $WORK/root"
rm -rf "$WORK/root"; mkdir -p "$WORK/root"
for f in "$WORK"/debs/*.deb; do dpkg -x "$f" "$WORK/root"; echo "${f##*/}"; done \
  | progress unpacked "$npkg packages" line
rm -rf "$WORK/debs"   # unpacked: the .debs are not needed again
log "unpacked: $(du -sh "$WORK/root" | cut -f1)"
GOROOT=$(ls -d "$WORK"/root/usr/lib/go-1.* | sort -V | tail -1)
[ -x "$GOROOT/bin/go" ] || { echo "no Go toolchain found under $WORK/root/usr/lib" >&2; exit 1; }
install -m 0755 "$WORK/root/usr/bin/etcd" "$BIN/etcd"
[ -x "$WORK/root/usr/bin/etcdctl" ] && install -m 0755 "$WORK/root/usr/bin/etcdctl" "$BIN/etcdctl" || true
[ -x "$WORK/root/usr/bin/kubectl" ] && install -m 0755 "$WORK/root/usr/bin/kubectl" "$BIN/kubectl" || true

# ---------------------------------------------------------------- Go build environment
export GOROOT PATH="$GOROOT/bin:$PATH"
export GOPATH="$WORK/root/usr/share/gocode"   # Debian's /usr/share/gocode/src tree
export GO111MODULE=off GOTOOLCHAIN=local GOPROXY=off GOFLAGS= CGO_ENABLED=0
export GOCACHE=${GOCACHE:-$WORK/gocache}
log "Go: $(go version)"

# ---------------------------------------------------------------- standalone main
SRC=$WORK/src/crd-apiserver
mkdir -p "$SRC"
cat > "$SRC/main.go" <<'GOEOF'
// crd-apiserver: k8s.io/apiextensions-apiserver run standalone (no kube-apiserver
// behind it) for integration tests.
//
// Differences from upstream k8s.io/apiextensions-apiserver/main.go:
//   - no "core" kube-apiserver is needed: --kubeconfig / --authentication-kubeconfig /
//     --authorization-kubeconfig are optional (TokenReview/SubjectAccessReview delegation
//     is off); the standard admission plugins and API Priority&Fairness (which need core informers)
//     are off; conversion webhooks given as a Service resolve to <svc>.<ns>.svc DNS names.
//   - authentication: client certificates (--client-ca-file) and, new here,
//     a static token file (--token-auth-file, kube-apiserver CSV format:
//     token,user,uid,"group1,group2"). Authorization: only members of the group
//     system:masters (and the always-allow paths /healthz,/readyz,/livez) are allowed.
//   - discovery: upstream leaves /api and /apis to kube-aggregator. Here /apis serves
//     both aggregated (apidiscovery.k8s.io/v2) and legacy APIGroupList discovery,
//     including CRD groups, and /api serves an empty APIVersions list.
//   - OpenAPI v2 is configured too, so the CRD OpenAPI controllers run and CRD schemas
//     are published at /openapi/v2 and /openapi/v3/apis/<group>/<version>.
//   - one admission check, kube-apiserver's NamespaceLifecycle in small: a namespaced create
//     in a namespace that does not exist is refused (404 namespaces "x" not found), as a
//     cluster refuses it. There is no core v1 Namespace here, so a namespace exists when a
//     cluster-scoped NamespaceStandIn (testenv.quartermaster.dev/v1) of its name does, or
//     when it is one of those every cluster has (default, kube-system, kube-public,
//     kube-node-lease). Without that check, code that forgets to create its namespaces
//     passes here and fails on a real server.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"
	noopoteltrace "go.opentelemetry.io/otel/trace/noop"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli"
	netutils "k8s.io/utils/net"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	o := options.NewCustomResourceDefinitionsServerOptions(os.Stdout, os.Stderr)
	// standalone: there is no core kube-apiserver to delegate to.
	o.RecommendedOptions.Authentication.RemoteKubeConfigFileOptional = true
	o.RecommendedOptions.Authorization.RemoteKubeConfigFileOptional = true
	o.RecommendedOptions.Features.EnablePriorityAndFairness = false
	tokenFile := ""

	cmd := &cobra.Command{
		Use:   "crd-apiserver",
		Short: "Standalone apiextensions-apiserver (CRDs + custom resources) for tests",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.ServerRunOptions.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.RecommendedOptions.CoreAPI = nil
			o.RecommendedOptions.Admission = nil
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return run(c.Context(), o, tokenFile)
		},
	}
	cmd.SetContext(ctx)
	fs := cmd.Flags()
	o.AddFlags(fs)
	fs.StringVar(&tokenFile, "token-auth-file", "", "CSV file token,user,uid,\"group1,group2\" for static bearer-token authentication")
	os.Exit(cli.Run(cmd))
}

func run(ctx context.Context, o *options.CustomResourceDefinitionsServerOptions, tokenFile string) error {
	if err := o.RecommendedOptions.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return fmt.Errorf("error creating self-signed certificates: %v", err)
	}
	serverConfig := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	if err := o.ServerRunOptions.ApplyTo(&serverConfig.Config); err != nil {
		return err
	}
	if err := o.RecommendedOptions.ApplyTo(serverConfig); err != nil {
		return err
	}
	if err := o.APIEnablement.ApplyTo(&serverConfig.Config, apiserver.DefaultAPIResourceConfigSource(), apiserver.Scheme); err != nil {
		return err
	}
	// The loopback client talks to this server itself; no client-side rate limit, so a
	// burst of creates is not slowed to the loopback default of 50 a second.
	loopback := rest.CopyConfig(serverConfig.LoopbackClientConfig)
	loopback.QPS = -1
	standIns, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	serverConfig.AdmissionControl = &namespaceLifecycle{client: standIns}
	if tokenFile != "" {
		tokens, err := tokenfile.NewCSV(tokenFile)
		if err != nil {
			return err
		}
		serverConfig.Authentication.Authenticator = union.New(bearertoken.New(tokens), serverConfig.Authentication.Authenticator)
	}
	// OpenAPI v2 must be configured too: the CRD OpenAPI (v2 and v3) publishing controllers
	// only run when the static v2 spec exists (upstream main.go sets only v3, so CRD schemas
	// were never published at /openapi/v3/apis/<group>/<version>, which kubectl validation needs).
	getDefs := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	serverConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(getDefs, openapinamer.NewDefinitionNamer(apiserver.Scheme, scheme.Scheme))
	serverConfig.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(getDefs, openapinamer.NewDefinitionNamer(apiserver.Scheme, scheme.Scheme))
	config := &apiserver.Config{
		GenericConfig: serverConfig,
		ExtraConfig: apiserver.ExtraConfig{
			CRDRESTOptionsGetter: options.NewCRDRESTOptionsGetter(*o.RecommendedOptions.Etcd, serverConfig.ResourceTransformers, serverConfig.StorageObjectCountTracker),
			ServiceResolver:      webhook.NewDefaultServiceResolver(),
			AuthResolverWrapper:  webhook.NewDefaultAuthenticationInfoResolverWrapper(nil, nil, serverConfig.LoopbackClientConfig, noopoteltrace.NewTracerProvider()),
		},
	}
	shim := &discoveryShim{}
	server, err := config.Complete().New(genericapiserver.NewEmptyDelegateWithCustomHandler(shim))
	if err != nil {
		return err
	}
	var agg http.Handler = server.GenericAPIServer.AggregatedDiscoveryGroupManager
	shim.aggregated.Store(&agg)
	server.GenericAPIServer.Handler.NonGoRestfulMux.Handle("/api", shim)
	server.GenericAPIServer.Handler.NonGoRestfulMux.Handle("/api/", shim)
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// namespaceStandIns holds the namespaces that exist: cluster-scoped, one object per namespace.
var namespaceStandIns = schema.GroupVersionResource{Group: "testenv.quartermaster.dev", Version: "v1", Resource: "namespacestandins"}

// builtinNamespaces exist in every cluster from its start.
var builtinNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}

// namespaceLifecycle refuses a namespaced create in a namespace that does not exist, with the
// error kube-apiserver's NamespaceLifecycle plugin returns. Creates only: an update or a patch
// needs an object, which needed a create; a server-side apply that creates is a create.
// Each check is a live read (no cache), so a namespace made just before is always seen.
type namespaceLifecycle struct {
	client dynamic.Interface
}

func (l *namespaceLifecycle) Handles(op admission.Operation) bool {
	return op == admission.Create
}

func (l *namespaceLifecycle) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	namespace := a.GetNamespace()
	if namespace == "" || builtinNamespaces[namespace] {
		return nil
	}
	_, err := l.client.Resource(namespaceStandIns).Get(ctx, namespace, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, namespace)
	default:
		return apierrors.NewInternalError(fmt.Errorf("looking up namespace %q: %w", namespace, err))
	}
}

// discoveryShim serves /api and /apis (the CRD handler hands "/apis" to its delegate).
type discoveryShim struct {
	aggregated atomic.Pointer[http.Handler]
}

func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
		Message: "the server could not find the requested resource",
	})
}

func (d *discoveryShim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	hp := d.aggregated.Load()
	switch {
	case p == "/api":
		writeJSON(w, http.StatusOK, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{}})
	case p == "/apis" && hp != nil:
		agg := *hp
		if strings.Contains(r.Header.Get("Accept"), "apidiscovery.k8s.io") {
			agg.ServeHTTP(w, r)
			return
		}
		req := r.Clone(r.Context())
		req.Header = http.Header{}
		req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		rec := httptest.NewRecorder()
		agg.ServeHTTP(rec, req)
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
			http.Error(w, "decoding aggregated discovery: "+err.Error(), http.StatusInternalServerError)
			return
		}
		out := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
		for _, g := range list.Items {
			ag := metav1.APIGroup{Name: g.Name}
			for _, v := range g.Versions {
				ag.Versions = append(ag.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g.Name + "/" + v.Version, Version: v.Version})
			}
			if len(ag.Versions) == 0 {
				continue
			}
			ag.PreferredVersion = ag.Versions[0]
			out.Groups = append(out.Groups, ag)
		}
		writeJSON(w, http.StatusOK, &out)
	default:
		notFound(w)
	}
}
GOEOF

# ---------------------------------------------------------------- build
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -o "$WORK/build.time" -f "%e s wall, %M KB max RSS")
# stamp the version (unstamped "v0.0.0-master+$Format:%H$" makes `kubectl version` exit 1):
# Debian's golang-k8s-apiextensions-apiserver-dev 0.X.Y corresponds to Kubernetes v1.X.Y
K8S_MINOR_PATCH=$(sed -n 's/^golang-k8s-apiextensions-apiserver-dev=0\.\([0-9]*\.[0-9]*\).*/\1/p' "$CP_DIR/manifest.txt")
V=k8s.io/component-base/version
LDFLAGS="-s -w -X $V.gitVersion=v1.$K8S_MINOR_PATCH -X $V.gitMajor=1 -X $V.gitMinor=${K8S_MINOR_PATCH%%.*}"
LDFLAGS="$LDFLAGS -X $V.gitTreeState=clean -X $V.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ngo=$(cd "$SRC" && go list -deps . 2>/dev/null | wc -l) || ngo="?"
log "step 5/5: compiling crd-apiserver v1.$K8S_MINOR_PATCH: $ngo Go packages (GOPATH mode, GOCACHE=$GOCACHE); the longest step"
t0=$SECONDS
( cd "$SRC" && "${TIME[@]}" go build -v -trimpath -ldflags="$LDFLAGS" -o "$BIN/crd-apiserver" . ) 2>&1 \
  | progress compiled "$ngo Go packages" line
log "compiled in $(( SECONDS - t0 ))s$([ -f "$WORK/build.time" ] && echo " ($(cat "$WORK/build.time"))")"
if [ "${BUILD_UPSTREAM:-0}" = 1 ]; then
  log "go build upstream apiextensions-apiserver"
  ( cd "$GOPATH/src/k8s.io/apiextensions-apiserver" && "${TIME[@]}" go build -trimpath -ldflags="$LDFLAGS" -o "$BIN/apiextensions-apiserver" . )
fi
ls -la "$BIN"
if [ "${KEEP_WORK:-0}" != 1 ]; then
  rm -rf "$WORK"   # sources and Go build cache: later runs need only bin/
fi
log "done: $(cd "$BIN" && echo *) in $BIN ($("$BIN/etcd" --version | head -1)); $(du -sh "$CP_DIR" | cut -f1) kept in $CP_DIR"
