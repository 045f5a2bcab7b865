#!/usr/bin/env bash
# Installs what a fresh machine lacks, idempotently and quickly when nothing is missing:
#   apt:   Java 17 (JDK), Maven, PostgreSQL, Redis, HAProxy (the gateway in front of the ad servers), Prometheus,
#          Chromium and chromium-driver (the dashboard's browser tests)
#   pip:   a Python 3.11 virtual environment in .venv with this project and its pinned requirements
#   Maven: the Kafka, Kafka Connect + Debezium, Flink Kafka connector and Flink Prometheus reporter jars into
#          .platform/jars
# Called by ./run before anything else; safe to run by hand.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf '[bootstrap] %s\n' "$*" >&2; }

missing=()
# a JDK, not only a JRE: Maven builds jobs/jvm's operators (the UDF jar), javac their unit tests' golden driver
command -v javac >/dev/null 2>&1 || [ -x "${JAVA_HOME:-/nonexistent}/bin/javac" ] || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)  # the metrics server `adserve up` starts
# headless Chromium and its WebDriver: the dashboard's browser tests and its screenshot at the end of the day
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if ! command -v postgres >/dev/null 2>&1 && ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
  missing+=(postgresql)
fi
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing with apt: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python="${ADSERVE_PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && \
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      python="$candidate"; break
    fi
  done
fi
if [ -z "$python" ]; then
  say "Python 3.11 is required (apache-flink 2.2 ships wheels for it): install it or set ADSERVE_PYTHON"
  exit 2
fi

venv="$ROOT/.venv"
if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtual environment $venv with $python"
  "$python" -m venv "$venv"
fi
stamp="$venv/.adserve-installed"
want=$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  say "installing the project and its pinned requirements into $venv (a few minutes on a fresh machine)"
  "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip setuptools wheel
  "$venv/bin/pip" install -q --disable-pip-version-check -e "$ROOT[test]"
  echo "$want" > "$stamp"
fi

"$venv/bin/adserve" fetch

# the UDF jar of jobs/jvm (Maven; the jobs ship it prebuilt, nothing compiles at submit): rebuilt only when a source
# or the pom is newer than the jar, so a re-run offline with the jar up to date needs no network
udf_jar="$ROOT/jobs/jvm/target/adserve-udf-0.1.0.jar"
if [ ! -f "$udf_jar" ] || [ -n "$(find "$ROOT/jobs/jvm/pom.xml" "$ROOT/jobs/jvm/io" -newer "$udf_jar" -print -quit)" ]; then
  say "building the UDF jar with Maven: $udf_jar"
  mvn -q -f "$ROOT/jobs/jvm/pom.xml" package
fi

# kustomize, which renders deploy/k8s for tests/unit/test_k8s_manifests.py: built from the Go module proxy into the
# platform's bin folder once, so no cluster tool is needed on the machine
kustomize_bin="${ADSERVE_HOME:-$ROOT/.platform}/bin/kustomize"
if [ ! -x "$kustomize_bin" ]; then
  go_cmd=$(command -v go || echo /usr/local/go/bin/go)
  say "building kustomize v5.5.0 with $go_cmd into $(dirname "$kustomize_bin")"
  GOBIN="$(dirname "$kustomize_bin")" "$go_cmd" install sigs.k8s.io/kustomize/kustomize/v5@v5.5.0
fi
