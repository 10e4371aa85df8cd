#!/usr/bin/env bash
# The compose topology without Docker, every process on 127.0.0.1:
#   prefect server (SQLite) <- worker (runs the flows) -> chroma run, plus the webhook service.
#
#   docker/run-local.sh            start everything, register the deployments, wait for Ctrl-C
#   docker/run-local.sh --check    start everything, check each health endpoint, stop; exit 0/1
#
# Run from anywhere; uses the project's .venv (make install). State and logs go under
# $HETRIEVER_RUN_DIR (default .hetriever/run-local in the project). Settings, all optional:
#   PREFECT_PORT (4200) CHROMA_PORT (8000) WORKER_HEALTH_PORT (8081) WEBHOOK_PORT (8765)
#   HETRIEVER_WEBHOOK_SECRET (generated for --check), HETRIEVER_WEBHOOK_REPOS,
#   HETRIEVER_DOCS_ROOT (the documentation repositories), HETRIEVER_INGEST_CRON.
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${HETRIEVER_VENV:-$PROJECT_DIR/.venv}/bin"
RUN_DIR="${HETRIEVER_RUN_DIR:-$PROJECT_DIR/.hetriever/run-local}"
HOST=127.0.0.1
PREFECT_PORT="${PREFECT_PORT:-4200}"
CHROMA_PORT="${CHROMA_PORT:-8000}"
WORKER_HEALTH_PORT="${WORKER_HEALTH_PORT:-8081}"
WEBHOOK_PORT="${WEBHOOK_PORT:-8765}"
STARTUP_SECONDS="${STARTUP_SECONDS:-120}"

CHECK=0
case "${1:-}" in
  --check) CHECK=1 ;;
  "") ;;
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

for tool in prefect chroma hetriever python; do
  [[ -x "$BIN/$tool" ]] || { echo "missing $BIN/$tool: run 'make install' first" >&2; exit 2; }
done

mkdir -p "$RUN_DIR/logs" "$RUN_DIR/prefect" "$RUN_DIR/chroma" "$RUN_DIR/state"

# Everything below talks to these; the Prefect profile of the user is left alone.
export PREFECT_HOME="$RUN_DIR/prefect"
export PREFECT_API_URL="http://$HOST:$PREFECT_PORT/api"
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
# Task-run state events recorded in batches (deployments/server_settings.py).
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE="${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE:-100}"
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE="${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE:-100}"
export PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL="${PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL:-1}"
# Run logs streamed out, so `prefect deployment run ... --watch` prints them.
export PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED="${PREFECT_SERVER_LOGS_STREAM_PUBLISHING_ENABLED:-true}"
export PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED="${PREFECT_SERVER_LOGS_STREAM_OUT_ENABLED:-true}"
export HETRIEVER_PROJECT_DIR="$PROJECT_DIR"
export HETRIEVER_CHROMA_HOST="$HOST"
export HETRIEVER_CHROMA_PORT="$CHROMA_PORT"
export HETRIEVER_STATE_DIR="$RUN_DIR/state"
export HETRIEVER_DOCS_ROOT="${HETRIEVER_DOCS_ROOT:-$PROJECT_DIR/docs}"
if [[ -z "${HETRIEVER_WEBHOOK_SECRET:-}" ]]; then
  if (( CHECK )); then
    HETRIEVER_WEBHOOK_SECRET="$("$BIN/python" -c 'import secrets; print(secrets.token_hex(16))')"
    export HETRIEVER_WEBHOOK_SECRET
  else
    echo "set HETRIEVER_WEBHOOK_SECRET (16+ characters) for the webhook service" >&2
    exit 2
  fi
fi

PIDS=()
NAMES=()
stop_all() {  # SIGTERM in reverse start order; SIGKILL what is still up after 15 s
  local i pid deadline
  for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
    kill "${PIDS[$i]}" 2>/dev/null || true
  done
  deadline=$((SECONDS + 15))
  for (( i=0; i<${#PIDS[@]}; i++ )); do
    pid="${PIDS[$i]}"
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "${NAMES[$i]} (pid $pid) ignored SIGTERM; killing it" >&2
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

start() {  # start NAME COMMAND...: in the background, output to $RUN_DIR/logs/NAME.log
  local name="$1"; shift
  "$@" >"$RUN_DIR/logs/$name.log" 2>&1 &
  PIDS+=("$!")
  NAMES+=("$name")
  echo "started $name (pid $!), log: $RUN_DIR/logs/$name.log"
}

wait_http() {  # wait_http NAME URL: until it answers 2xx, or fail with the log's tail
  local name="$1" url="$2" deadline=$((SECONDS + STARTUP_SECONDS))
  until "$BIN/python" - "$url" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2)
PY
  do
    if (( SECONDS > deadline )); then
      echo "FAIL $name: no answer from $url within ${STARTUP_SECONDS}s" >&2
      tail -n 20 "$RUN_DIR/logs/$name.log" >&2 || true
      return 1
    fi
    sleep 1
  done
  echo "ok   $name: $url"
}

# Niced (deployments/server_settings.py SERVER_NICENESS): its bookkeeping yields the cores to ingests.
start prefect-server nice -n 10 "$BIN/prefect" server start --host "$HOST" --port "$PREFECT_PORT"
start chroma "$BIN/chroma" run --path "$RUN_DIR/chroma" --host "$HOST" --port "$CHROMA_PORT"
wait_http prefect-server "$PREFECT_API_URL/health"
wait_http chroma "http://$HOST:$CHROMA_PORT/api/v2/heartbeat"

# The pool and the deployments of prefect.yaml (idempotent).
(cd "$PROJECT_DIR" && "$BIN/python" -m deployments.register) >"$RUN_DIR/logs/register.log" 2>&1 \
  || { echo "FAIL register: see $RUN_DIR/logs/register.log" >&2; tail -n 20 "$RUN_DIR/logs/register.log" >&2; exit 1; }
echo "ok   deployments registered"

start worker env PREFECT_WORKER_WEBSERVER_HOST="$HOST" PREFECT_WORKER_WEBSERVER_PORT="$WORKER_HEALTH_PORT" \
  "$BIN/prefect" worker start --pool hetriever-pool --type process --with-healthcheck
start webhook "$BIN/hetriever" serve-webhook --host "$HOST" --port "$WEBHOOK_PORT"
wait_http worker "http://$HOST:$WORKER_HEALTH_PORT/health"
wait_http webhook "http://$HOST:$WEBHOOK_PORT/healthz"

if (( CHECK )); then
  echo "all healthy; stopping"
  exit 0
fi

cat <<EOF

Prefect UI:  http://$HOST:$PREFECT_PORT
Webhook:     http://$HOST:$WEBHOOK_PORT/webhook
Chroma:      http://$HOST:$CHROMA_PORT
Run an ingest now:  PREFECT_API_URL=$PREFECT_API_URL $BIN/prefect deployment run ingest/scheduled
Ctrl-C stops everything.
EOF
# Stop as soon as any process dies, so a crash is not hidden behind the others.
wait -n "${PIDS[@]}" || true
echo "a process exited; stopping the rest" >&2
exit 1
