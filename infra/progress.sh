# Sourced by the setup scripts: run a long step with a line of progress every 15 s instead of
# minutes of silence.  with_progress "what" "shell command printing a count" command args...
with_progress() {
  local what=$1 counter=$2 started pid
  shift 2
  started=$(date +%s)
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && printf '[setup]   %s: %ds so far, %s\n' "$what" "$(( $(date +%s) - started ))" "$(eval "$counter" 2>/dev/null)" >&2
  done
  wait "$pid"
}
