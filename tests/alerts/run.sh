#!/bin/sh
# Checks and unit-tests the reference alert rules (assets/prometheus/example-rules-*.yml) of every
# flavour with promtool, that every alert of a rule file has a test, and (without arguments)
# that the three files loaded together do not mix their flavours' series.
#   tests/alerts/run.sh                 all flavours
#   tests/alerts/run.sh dcgm            one flavour
#   PROMTOOL=/path/to/promtool tests/alerts/run.sh
# Debian/Ubuntu: `apt-get install prometheus` provides /usr/bin/promtool (2.42 on bookworm).
set -u
cd "$(dirname "$0")" || exit 2
PROMTOOL=${PROMTOOL:-promtool}
if ! command -v "$PROMTOOL" >/dev/null 2>&1; then
    echo "run.sh: promtool not found (apt-get install prometheus, or set PROMTOOL)" >&2
    exit 2
fi
"$PROMTOOL" --version 2>&1 | head -n 1

flavours=${*:-vramscope dcgm nvitop}
status=0
for flavour in $flavours; do
    rules=../../assets/prometheus/example-rules-$flavour.yml
    tests=$flavour.test.yml
    echo "== $flavour"
    "$PROMTOOL" check rules --lint=all --lint-fatal "$rules" || status=1
    "$PROMTOOL" test rules "$tests" || status=1
    # Every alert of the rule file is the subject of at least one test.
    for alert in $(sed -n 's/^ *- alert: *//p' "$rules" | sort -u); do
        if ! grep -q "alertname: $alert\$" "$tests"; then
            echo "  no test for alert $alert in $tests" >&2
            status=1
        fi
    done
done
if [ $# -eq 0 ]; then
    # All three files in one Prometheus: no rule of one flavour picks up another's series.
    echo "== all flavours together"
    "$PROMTOOL" test rules combined.test.yml || status=1
fi
if [ "$status" -eq 0 ]; then echo "all alert rule checks and tests passed"; fi
exit "$status"
