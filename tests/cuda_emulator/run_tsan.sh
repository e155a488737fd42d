#!/bin/sh
# Runs a ThreadSanitizer test program (its arguments: the program and its own), stopping at
# the first race it reports. A ThreadSanitizer that cannot start on this kernel (its address
# space layout: "unexpected memory mapping" where the kernel randomises more bits than it
# knows) is tried once more without address randomisation, then reported skipped (exit 77):
# that is the machine, not the code.
export TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}"
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
cannot_start() { grep -q "ThreadSanitizer: unexpected memory mapping" "$log"; }
"$@" 2>"$log"
rc=$?
if [ $rc -ne 0 ] && cannot_start && command -v setarch >/dev/null; then
  setarch "$(uname -m)" -R "$@" 2>"$log"
  rc=$?
fi
cat "$log" >&2
if [ $rc -ne 0 ] && cannot_start; then
  echo "run_tsan: skipped: ThreadSanitizer cannot start on this kernel (see above)" >&2
  exit 77
fi
exit $rc
