# Shared by scripts/playground and bench/apiserver-latency: a real control plane from the
# tests/k8s harness, the CRDs, and `tenant-gateway serve` registered as the webhook.
# Source it from the repository root with: work=DIR; bin=PATH-TO-tenant-gateway.

say() { printf '==> %s\n' "$*" >&2; }

cp_pid=""
serve_pid=""

cluster_cleanup() {
  if [ -n "$serve_pid" ]; then kill -TERM "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null; fi
  if [ -n "$cp_pid" ]; then kill -TERM "$cp_pid" 2>/dev/null; wait "$cp_pid" 2>/dev/null; fi
  serve_pid=""
  cp_pid=""
}

# start_control_plane [tgcp flags...]: tests/k8s/control-plane in $work/cp; sets kubectl=(...).
start_control_plane() {
  tests/k8s/control-plane --dir "$work/cp" "$@" >"$work/cp.url" 2>"$work/cp.stderr" &
  cp_pid=$!
  local deadline=$((SECONDS + 2400))
  until [ -f "$work/cp/ready" ]; do
    kill -0 "$cp_pid" 2>/dev/null || { cat "$work/cp.stderr" >&2; echo "control plane exited" >&2; return 1; }
    [ $SECONDS -lt $deadline ] || { echo "control plane not ready in time" >&2; return 1; }
    sleep 0.2
  done
  kubectl=("$work/cp/bin/kubectl" --kubeconfig "$work/cp/kubeconfig")
}

# install_crds: Gateway API (experimental), cert-manager, Cozystack stand-ins, TenantGateway.
install_crds() {
  tests/k8s/fetch-crds --out "$work/crds" >/dev/null
  "${kubectl[@]}" apply --server-side -f "$work/crds" -f tests/k8s/crds >/dev/null
  "$bin" crd | "${kubectl[@]}" apply --server-side -f - >/dev/null
  "${kubectl[@]}" wait --for condition=established --timeout=120s crd --all >/dev/null
}

# start_serve PORT METRICS_PORT [extra serve flags...]: dev certs in $work/certs. The
# reconciler runs unless the flags say --no-controller. The webhook listens on $serve_host
# (default 127.0.0.1), which the serving certificate names too.
start_serve() {
  local port=$1 mport=$2 host=${serve_host:-127.0.0.1} hosts=127.0.0.1,localhost
  shift 2
  [ "$host" = 127.0.0.1 ] || hosts+=",$host"
  "$bin" certs --out "$work/certs" --hosts "$hosts" >/dev/null
  "$bin" serve --listen "$host:$port" --metrics-listen "127.0.0.1:$mport" \
    --tls-cert-file "$work/certs/tls.crt" --tls-key-file "$work/certs/tls.key" \
    --kubeconfig "$work/cp/kubeconfig" --root-host example.org "$@" \
    2>"$work/serve.log" &
  serve_pid=$!
  local deadline=$((SECONDS + 60))
  until curl -sf "http://127.0.0.1:$mport/readyz" >/dev/null 2>&1; do
    kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; echo "serve exited" >&2; return 1; }
    [ $SECONDS -lt $deadline ] || { echo "serve not ready in time" >&2; return 1; }
    sleep 0.1
  done
}

# register_webhook PORT: the by-URL ValidatingWebhookConfiguration named tenant-gateway.
register_webhook() {
  "$bin" webhook-configuration --url "https://127.0.0.1:$1" --ca-file "$work/certs/ca.crt" \
    | "${kubectl[@]}" apply -f - >/dev/null
}

# create_tenants: the demo tenant tree of examples/namespaces.yaml (tenant-root: example.org,
# tenant-alice: alice.example.org, tenant-bob, tenant-cust: customer1.io, ...), the fixture
# the real-API-server tests and the offline examples use too.
create_tenants() {
  "${kubectl[@]}" apply -f examples/namespaces.yaml >/dev/null
}

# wait_denied FILE: until a dry-run apply of FILE as alice is denied (admission in effect).
wait_denied() {
  local deadline=$((SECONDS + 90))
  while "${kubectl[@]}" --as alice --as-group e2e:users apply --dry-run=server -f "$1" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "admission did not take effect" >&2; return 1; }
    sleep 0.2
  done
}

# wait_allowed FILE: until a dry-run apply of FILE as admin passes (admission removed).
wait_allowed() {
  local deadline=$((SECONDS + 90))
  until "${kubectl[@]}" apply --dry-run=server -f "$1" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "admission still in effect" >&2; return 1; }
    sleep 0.2
  done
}
